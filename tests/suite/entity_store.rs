//! The entity part of the store contract (`store::entity`), each case run
//! on every backend (`for_every_backend!`): the Redis store (real
//! redis-server, the Lua of `lua/entity.lua`) and the embedded store (the
//! same rules in Rust) must judge, settle and remember alike.

use std::time::Duration;

use bytes::Bytes;
use idemgate::config::{CacheStatus, Sources};
use idemgate::record::{
    Fingerprint, InboxEntry, OwnerMint, Record, RecordState, Stage, StoredBody, StoredRequest,
    StoredResponse,
};
use idemgate::store::entity::{
    Blocker, EntityEffect, EntityStep, EntityVerdict, Judgement, TransitionKind,
};
use idemgate::store::inbox::{InboxOps, Swapped};
use idemgate::store::{ClaimOutcome, EntityKey, Lease, Purged, Releasing, Store, StoreKey};

use crate::support::RedisServer;

const LONG: Duration = Duration::from_secs(60);
const ENTITY: &str = "0123456789abcdef0123456789abcdef";
/// A second entity, for the sequences that leave the first one alone.
const OTHER: &str = "fedcba9876543210fedcba9876543210";

fn key(n: u8) -> StoreKey {
    key_of(ENTITY, n)
}

fn key_of(entity: &str, n: u8) -> StoreKey {
    StoreKey::for_entity("contract", "pay", &format!("{n:02x}").repeat(32), entity)
}

fn step(to: &str, from: &[&str]) -> EntityStep {
    step_of(ENTITY, to, from)
}

fn step_of(entity: &str, to: &str, from: &[&str]) -> EntityStep {
    EntityStep {
        key: EntityKey::new("contract", "pay", entity),
        to: to.to_owned(),
        sources: Sources {
            from: from.iter().map(|s| (*s).to_owned()).collect(),
            initial: true,
        },
        retention: LONG,
        advance: CacheStatus::successes(),
        event: None,
    }
}

fn response(status: u16) -> StoredResponse {
    StoredResponse {
        status,
        headers: Vec::new(),
        body: StoredBody::Kept(Bytes::from_static(b"ok")),
    }
}

fn answer() -> RecordState {
    RecordState::Completed(response(200))
}

fn inbox(stage: Stage, last: Option<u16>) -> RecordState {
    RecordState::Inbox(Box::new(InboxEntry {
        ack: response(200),
        stage,
        attempts: 1,
        limit: 1,
        due_ms: 0,
        route: "pay".into(),
        last_error: String::new(),
        last_answer: last.map(response),
        request: StoredRequest {
            method: Bytes::from_static(b"POST"),
            target: Bytes::from_static(b"/pay"),
            headers: Vec::new(),
            body: Bytes::from_static(b"{}"),
        },
        probes: 0,
    }))
}

/// The `unknown_hold` every claim here is written with.
const CLAIM_HOLD: Duration = Duration::from_secs(7);

async fn claim<S: Store>(store: &S, mint: &OwnerMint, n: u8, step: &EntityStep) -> ClaimOutcome {
    // Each claim keeps its hold, as the pipeline's do: a busy entity
    // reports it back (the claim is judged by it, not the reader's).
    let record = Record::in_flight(mint.next(), Fingerprint([n; 32]), None).with_hold(CLAIM_HOLD);
    let key = key_of(step.key.hash(), n);
    store
        .claim(&key, record, LONG, (Some(step), None))
        .await
        .unwrap()
}

async fn blocker<S: Store>(store: &S, mint: &OwnerMint, n: u8, step: &EntityStep) -> Blocker {
    match claim(store, mint, n, step).await {
        ClaimOutcome::Decided(EntityVerdict::Busy { blocker }) => blocker,
        other => panic!("delivery {n}: expected a busy entity, got {other:?}"),
    }
}

async fn claimed<S: Store>(store: &S, mint: &OwnerMint, n: u8, step: &EntityStep) -> Lease {
    match claim(store, mint, n, step).await {
        ClaimOutcome::Claimed(lease) => lease,
        other => panic!("delivery {n}: expected a claim, got {other:?}"),
    }
}

async fn complete<S: Store>(store: &S, lease: &Lease, state: RecordState) {
    complete_for(store, lease, state, LONG).await;
}

async fn complete_for<S: Store>(store: &S, lease: &Lease, state: RecordState, ttl: Duration) {
    let record = lease.record().with_state(state);
    let effect = EntityEffect::of(&record, &CacheStatus::successes());
    let stored = store
        .complete(lease.key(), lease.owner(), &record, ttl, effect)
        .await
        .unwrap();
    assert!(stored.stored());
}

/// The writer of one inbox record after its claim, as a worker or an
/// operator rewrites it: each write expects the owner the last one left.
struct InboxWriter<'a, S> {
    store: &'a S,
    mint: &'a OwnerMint,
    lease: &'a Lease,
    owner: idemgate::record::OwnerToken,
}

impl<'a, S: Store + InboxOps> InboxWriter<'a, S> {
    /// The writer of the record `lease` claimed.
    fn of(store: &'a S, mint: &'a OwnerMint, lease: &'a Lease) -> Self {
        let owner = lease.owner();
        Self {
            store,
            mint,
            lease,
            owner,
        }
    }

    /// Rewrites the record as `state` under a fresh owner.
    async fn write(&mut self, state: RecordState) {
        let mut record = self.lease.record().with_state(state);
        record.owner = self.mint.next();
        let effect = EntityEffect::of(&record, &CacheStatus::successes());
        let swapped = self
            .store
            .swap(self.lease.key(), self.owner, &record, LONG, effect)
            .await
            .unwrap();
        assert_eq!(swapped, Swapped::Written);
        self.owner = record.owner;
    }
}

async fn state_of<S: Store>(store: &S, entity: &str) -> idemgate::store::entity::EntityState {
    let key = EntityKey::new("contract", "pay", entity);
    store.entity(&key).await.unwrap().expect("an entity").0
}

async fn entity_contract<S: Store>(store: &S) {
    let mint = OwnerMint::new();
    let entity = EntityKey::new("contract", "pay", ENTITY);
    assert!(store.entity(&entity).await.unwrap().is_none());

    // 1: pending, applied by its completion.
    let pending = claimed(store, &mint, 1, &step("pending", &[])).await;
    // 2 (success) while 1 is in flight: busy.
    let success = step("success", &["pending", "failed"]);
    match blocker(store, &mint, 2, &success).await {
        Blocker::InFlight { remaining, hold } => {
            assert!(remaining > Duration::from_secs(50), "{remaining:?}");
            assert_eq!(hold.0, Some(CLAIM_HOLD), "the pending claim's own hold");
        }
        other => panic!("expected busy behind a change in flight, got {other:?}"),
    }
    complete(store, &pending, answer()).await;
    let (state, ttl) = store.entity(&entity).await.unwrap().unwrap();
    assert_eq!(state.state.as_deref(), Some("pending"));
    assert!(state.pending.is_none());
    assert!(ttl.is_some_and(|ttl| ttl <= LONG));

    // 2 again: claimed; its handler fails (released): the state stays.
    let lease = claimed(store, &mint, 2, &success).await;
    assert!(
        store
            .release(lease.key(), lease.owner(), Releasing::Owned)
            .await
            .unwrap()
    );
    // 3 (failed) is still an allowed change from pending; its outcome is
    // unknown: the entity stays busy.
    let failed = claimed(store, &mint, 3, &step("failed", &["pending"])).await;
    complete(store, &failed, RecordState::Unknown).await;
    assert!(matches!(
        blocker(store, &mint, 2, &success).await,
        Blocker::Unknown { .. }
    ));
    // The operator purges the unknown record: the change never happened.
    assert_eq!(
        store.purge(failed.key(), None).await.unwrap(),
        Purged::Deleted
    );
    let lease = claimed(store, &mint, 2, &success).await;
    complete(store, &lease, answer()).await;

    // 4 (failed) after the success: refused; 5 (success): a repeat.
    assert_eq!(
        match claim(store, &mint, 4, &step("failed", &["pending"])).await {
            ClaimOutcome::Decided(verdict) => verdict,
            other => panic!("{other:?}"),
        },
        EntityVerdict::Judged(Judgement::Refused {
            from: Some("success".into())
        })
    );
    assert!(matches!(
        claim(store, &mint, 5, &success).await,
        ClaimOutcome::Decided(EntityVerdict::Judged(Judgement::Repeat))
    ));
    // A copy of delivery 2 is its record's business, not the entity's.
    assert!(matches!(
        claim(store, &mint, 2, &success).await,
        ClaimOutcome::Existing(_)
    ));

    let (state, _) = store.entity(&entity).await.unwrap().unwrap();
    assert_eq!(state.state.as_deref(), Some("success"));
    assert_eq!((state.applied, state.refused, state.repeats), (2, 1, 1));
    let kinds: Vec<(TransitionKind, Option<&str>, &str)> = state
        .history
        .iter()
        .map(|t| (t.kind, t.from.as_deref(), t.to.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (TransitionKind::Repeat, Some("success"), "success"),
            (TransitionKind::Refused, Some("success"), "failed"),
            (TransitionKind::Applied, Some("pending"), "success"),
            (TransitionKind::Applied, None, "pending"),
        ]
    );
    assert_eq!(state.history[2].delivery, key(2).hash());
    assert!(state.history.windows(2).all(|w| w[0].at_ms >= w[1].at_ms));
}

/// The entity follows the handler: only an answer `advance_status` lists
/// applies a change, a stored refusal (404) drops it.
async fn a_stored_refusal_leaves_the_entity<S: Store>(store: &S) {
    let mint = OwnerMint::new();
    let paid = step_of(OTHER, "success", &["pending"]);
    let lease = claimed(store, &mint, 1, &step_of(OTHER, "pending", &[])).await;
    complete(store, &lease, answer()).await;
    // The handler answers the success notice 404; cache_status stores it.
    let lease = claimed(store, &mint, 2, &paid).await;
    complete(store, &lease, RecordState::Completed(response(404))).await;
    let entity = state_of(store, OTHER).await;
    assert_eq!(entity.state.as_deref(), Some("pending"));
    assert!(entity.pending.is_none());
    // The next success notice (a re-notification) reaches the handler.
    let lease = claimed(store, &mint, 3, &paid).await;
    complete(store, &lease, answer()).await;
    let entity = state_of(store, OTHER).await;
    assert_eq!(entity.state.as_deref(), Some("success"));
    assert_eq!(entity.applied, 2);
}

/// A change whose record vanished unsettled (an unknown outcome whose
/// hold ran out) holds the entity, copies included, until an operator
/// purges the pending delivery.
async fn an_unresolved_change_holds_the_entity<S: Store>(store: &S) {
    let mint = OwnerMint::new();
    let paid = step_of(OTHER, "success", &["pending"]);
    let lease = claimed(store, &mint, 1, &step_of(OTHER, "pending", &[])).await;
    complete(store, &lease, answer()).await;
    let lease = claimed(store, &mint, 2, &paid).await;
    complete_for(
        store,
        &lease,
        RecordState::Unknown,
        Duration::from_millis(50),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(Store::lookup(store, lease.key()).await.unwrap().is_none());
    assert_eq!(blocker(store, &mint, 3, &paid).await, Blocker::Unresolved);
    assert_eq!(
        blocker(store, &mint, 2, &paid).await,
        Blocker::Unresolved,
        "a copy of the unresolved delivery is not run again either"
    );
    let refund = step_of(OTHER, "refunded", &["success"]);
    assert_eq!(blocker(store, &mint, 4, &refund).await, Blocker::Unresolved);
    let entity = state_of(store, OTHER).await;
    assert_eq!(entity.state.as_deref(), Some("pending"));
    assert_eq!(
        entity.pending.as_ref().map(|p| p.delivery().to_owned()),
        Some(lease.key().hash().to_owned())
    );
    // The operator, having checked the handler, says it never happened.
    assert_eq!(
        store.purge(lease.key(), None).await.unwrap(),
        Purged::Deleted
    );
    let lease = claimed(store, &mint, 2, &paid).await;
    complete(store, &lease, answer()).await;
    assert_eq!(
        state_of(store, OTHER).await.state.as_deref(),
        Some("success")
    );
}

/// A dead inbox delivery keeps its change pending: the entity is held,
/// and the operator's retry that delivers it applies it; a drop drops it.
async fn a_dead_delivery_holds_its_change<S: Store + InboxOps>(store: &S) {
    let mint = OwnerMint::new();
    let paid = step_of(OTHER, "success", &["pending"]);
    let refund = step_of(OTHER, "refunded", &["success"]);
    let lease = claimed(store, &mint, 1, &step_of(OTHER, "pending", &[])).await;
    complete(store, &lease, answer()).await;
    // The success's live call fails: queued; its redeliveries fail: dead.
    let lease = claimed(store, &mint, 2, &paid).await;
    complete(store, &lease, inbox(Stage::Queued, None)).await;
    assert_eq!(blocker(store, &mint, 3, &refund).await, Blocker::Inbox);
    let mut writer = InboxWriter::of(store, &mint, &lease);
    writer.write(inbox(Stage::Dead, Some(503))).await;
    assert_eq!(blocker(store, &mint, 3, &refund).await, Blocker::Inbox);
    assert_eq!(blocker(store, &mint, 4, &paid).await, Blocker::Inbox);
    // Retried by the operator, delivered: the entity takes the state.
    writer.write(inbox(Stage::Queued, Some(503))).await;
    writer.write(inbox(Stage::Delivered, Some(200))).await;
    let entity = state_of(store, OTHER).await;
    assert_eq!(entity.state.as_deref(), Some("success"));
    assert!(entity.pending.is_none());
    // The refund waits no more; queued, dead, then dropped: never made.
    let lease = claimed(store, &mint, 3, &refund).await;
    complete(store, &lease, inbox(Stage::Queued, None)).await;
    let mut writer = InboxWriter::of(store, &mint, &lease);
    writer.write(inbox(Stage::Dead, Some(503))).await;
    writer.write(inbox(Stage::Dropped, Some(503))).await;
    let entity = state_of(store, OTHER).await;
    assert_eq!(entity.state.as_deref(), Some("success"));
    assert!(entity.pending.is_none());
    // A redelivery the handler refused (404, stored) drops it too.
    let lease = claimed(store, &mint, 5, &refund).await;
    complete(store, &lease, inbox(Stage::Queued, None)).await;
    InboxWriter::of(store, &mint, &lease)
        .write(inbox(Stage::Delivered, Some(404)))
        .await;
    let entity = state_of(store, OTHER).await;
    assert_eq!(entity.state.as_deref(), Some("success"));
    assert!(entity.pending.is_none());
}

crate::support::for_every_backend!(
    entity_contract,
    a_stored_refusal_leaves_the_entity,
    an_unresolved_change_holds_the_entity,
    a_dead_delivery_holds_its_change,
);

/// `claim_entity.lua` and `hold.lua` as compiled in: the record layout and
/// the shared rules in front of the script.
fn script_text(name: &str) -> String {
    let read = |file: &str| {
        std::fs::read_to_string(crate::support::repo_path(&format!("lua/{file}.lua"))).unwrap()
    };
    read("record") + &read("entity") + &read("probe") + &read(name)
}

/// The scripts touch the entity's pending change only as their caller
/// declared it: told there is none while the entity has one pending (the
/// caller's first try), each answers `moved` with the key to declare and
/// writes nothing; told that key, each judges it (its record gone:
/// unresolved, busy).
#[test]
fn a_stale_declaration_of_the_pending_change_moves_nothing() {
    let redis = RedisServer::start();
    let (entity, record, pending) = (
        format!("idemgate:pay:entity:{ENTITY}"),
        format!("idemgate:pay:{}{{{ENTITY}}}", "a".repeat(64)),
        format!("idemgate:pay:{}{{{ENTITY}}}", "b".repeat(64)),
    );
    let owed = "idemgate:pay:inbox:owed".to_owned();
    redis.cli(&["HSET", &entity, "pk", &pending, "pf", "", "pt", "PAID"]);
    let claim = script_text("claim_entity");
    let hold = script_text("hold");
    let claim_with = |declared: &str| {
        redis.cli(&[
            "EVAL", &claim, "3", &record, &entity, declared, "rec", "60000", "PAID", "60000", "1",
            "", "", "",
        ])
    };
    let hold_with = |declared: &str| {
        redis.cli(&[
            "EVAL", &hold, "4", &record, &entity, &owed, declared, "rec", "60000", "ab", "32",
            "60000", "PAID", "1", "",
        ])
    };
    assert_eq!(claim_with(&entity).trim(), format!("0\nmoved\n{pending}"));
    assert_eq!(hold_with(&entity).trim(), format!("moved\n{pending}"));
    assert_eq!(
        redis.cli(&["EXISTS", &record]).trim(),
        "0",
        "nothing claimed or held"
    );
    assert_eq!(claim_with(&pending).trim(), "0\nbusy\n-2\nunresolved");
    assert_eq!(hold_with(&pending).trim(), "held");
}
