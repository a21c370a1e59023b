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
    Backlog, BookLine, Books, InboxKeys, InboxOps, Index, IndexPosition, Place, Swapped,
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

    indexes_contract(store).await;
    places_contract(store).await;

    // The books: zero before anything is written, one per addition, per
    // scope.
    let books = InboxKeys::new("contract", "inbox");
    let other = InboxKeys::new("contract", "elsewhere");
    assert_eq!(store.books(&books).await.unwrap(), Books::default());
    for line in [
        BookLine::Acknowledged,
        BookLine::Acknowledged,
        BookLine::Acknowledged,
        BookLine::Delivered,
        BookLine::Dropped,
    ] {
        store.book(&books, line).await.unwrap();
    }
    store.book(&other, BookLine::Dropped).await.unwrap();
    let read = store.books(&books).await.unwrap();
    assert_eq!(
        BookLine::ALL.map(|line| read.get(line)),
        [3, 1, 1],
        "acknowledged, delivered, dropped"
    );
    assert_eq!(store.books(&other).await.unwrap().get(BookLine::Dropped), 1);
}

/// Puts `member` where `place` says in the scope `keys`.
async fn place<S: InboxOps>(store: &S, keys: &InboxKeys, member: &str, place: Place) {
    store.place(keys, member, place).await.unwrap();
}

/// The whole of the scope's `index`, lowest score first.
async fn all<S: InboxOps>(store: &S, keys: &InboxKeys, index: Index) -> Vec<(String, u64)> {
    store.page(keys, index, None, usize::MAX).await.unwrap()
}

/// The due index: keyset pages, and taking due deliveries with a
/// visibility timeout.
async fn indexes_contract<S: InboxOps>(store: &S) {
    let keys = InboxKeys::new("contract", "inbox");
    for (member, score) in [("a", 10), ("b", 5), ("c", 20)] {
        place(store, &keys, member, Place::due_at(score)).await;
    }
    place(store, &keys, "a", Place::into_index(Index::Dead, 1)).await;
    let due = async |after: Option<IndexPosition>, limit| {
        let page = store.page(&keys, Index::Due, after.as_ref(), limit);
        page.await.unwrap()
    };
    let page = due(None, 10).await;
    assert_eq!(page, [("b".into(), 5), ("a".into(), 10), ("c".into(), 20)]);
    let after = |member: &str, score| IndexPosition {
        score,
        member: member.into(),
    };
    assert_eq!(due(Some(after("b", 5)), 1).await, [("a".into(), 10)]);
    // Keyset: members sharing a score resume after the last one shown,
    // and a position whose member is gone resumes where it stood.
    for member in ["e", "d", "f"] {
        place(store, &keys, member, Place::due_at(10)).await;
    }
    assert_eq!(
        due(Some(after("d", 10)), 2).await,
        [("e".into(), 10), ("f".into(), 10)]
    );
    place(store, &keys, "d", Place::out_of(Index::Due)).await;
    assert_eq!(
        due(Some(after("d", 10)), 9).await,
        [("e".into(), 10), ("f".into(), 10), ("c".into(), 20)]
    );
    for member in ["e", "f"] {
        place(store, &keys, member, Place::out_of(Index::Due)).await;
    }
    assert!(due(None, 0).await.is_empty());
    assert_eq!(
        store.take_due(&keys, 15, 10, 100).await.unwrap(),
        ["b", "a"]
    );
    assert!(
        store.take_due(&keys, 15, 10, 100).await.unwrap().is_empty(),
        "taken ones are hidden"
    );
    assert_eq!(
        store.take_due(&keys, 100, 1, 200).await.unwrap(),
        ["c"],
        "the lowest due first, one by limit"
    );
    assert_eq!(
        all(store, &keys, Index::Dead).await,
        [("a".into(), 1)],
        "indexes are apart"
    );
    assert_eq!(
        store.take_due(&keys, 100, 10, 300).await.unwrap(),
        ["a", "b"],
        "due again at push_to"
    );
    place(store, &keys, "b", Place::out_of(Index::Due)).await;
    place(store, &keys, "b", Place::out_of(Index::Due)).await;
    assert_eq!(
        all(store, &keys, Index::Due).await,
        [("c".into(), 200), ("a".into(), 300)],
        "leaving an index twice is leaving it once"
    );
    let elsewhere = InboxKeys::new("contract", "elsewhere");
    assert!(
        store
            .take_due(&elsewhere, 1_000, 10, 2_000)
            .await
            .unwrap()
            .is_empty(),
        "scopes are apart"
    );
}

/// A delivery's places as its stage changes, and the backlog they add up
/// to.
async fn places_contract<S: InboxOps>(store: &S) {
    let keys = InboxKeys::new("contract", "places");
    let backlog = async || store.backlog(&keys).await.unwrap();
    assert_eq!(backlog().await, Backlog::default());
    place(store, &keys, "p", Place::pending(7, 50)).await;
    place(store, &keys, "q", Place::pending(3, 60)).await;
    place(store, &keys, "h", Place::held(9)).await;
    assert_eq!(
        backlog().await,
        Backlog {
            pending: 2,
            oldest_ms: Some(3),
            held: 1
        }
    );
    assert_eq!(backlog().await.owed(), 3);
    assert_eq!(
        all(store, &keys, Index::Due).await,
        [("p".into(), 50), ("q".into(), 60)]
    );
    // Held: into dead, out of both pending indexes.
    place(store, &keys, "q", Place::held(70)).await;
    assert_eq!(all(store, &keys, Index::Since).await, [("p".into(), 7)]);
    assert_eq!(all(store, &keys, Index::Due).await, [("p".into(), 50)]);
    assert_eq!(
        all(store, &keys, Index::Dead).await,
        [("h".into(), 9), ("q".into(), 70)]
    );
    // Pending again (an operator's retry): out of dead.
    place(store, &keys, "h", Place::pending(80, 80)).await;
    assert_eq!(all(store, &keys, Index::Dead).await, [("q".into(), 70)]);
    // A new due time moves only the due entry.
    place(store, &keys, "h", Place::due_at(90)).await;
    assert_eq!(
        all(store, &keys, Index::Since).await,
        [("p".into(), 7), ("h".into(), 80)]
    );
    assert_eq!(
        all(store, &keys, Index::Due).await,
        [("p".into(), 50), ("h".into(), 90)]
    );
    // Resolved: out of every index, whichever it was in.
    for member in ["p", "q", "h"] {
        place(store, &keys, member, Place::resolved()).await;
    }
    assert_eq!(backlog().await, Backlog::default());
    for index in [Index::Due, Index::Since, Index::Dead] {
        assert!(all(store, &keys, index).await.is_empty(), "{index:?}");
    }
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

async fn owed<S: InboxOps>(store: &S, set: &InboxKeys) -> Vec<String> {
    let mut members = store.owed(set).await.unwrap();
    members.sort();
    members
}

/// The owed sets: written with the record (queued by `complete`, every
/// stage by `swap`), so every delivery the inbox owes is listed; pruned
/// only when the record is gone or still the one read.
async fn owed_contract<S: Store + InboxOps>(store: &S) {
    let mint = OwnerMint::new();
    let set = InboxKeys::new("contract", "owed");
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
