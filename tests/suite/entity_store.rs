//! The entity part of the store contract (`store::entity`), one sequence
//! run on the Redis store (real redis-server, the Lua of `lua/entity.lua`)
//! and on the embedded store (the same rules in Rust): both must judge,
//! settle and remember alike.

use std::time::Duration;

use bytes::Bytes;
use idemgate::config::Sources;
use idemgate::record::{Fingerprint, OwnerMint, Record, RecordState, StoredBody, StoredResponse};
use idemgate::store::embedded::EmbeddedStore;
use idemgate::store::entity::{EntityStep, EntityVerdict, TransitionKind};
use idemgate::store::redis::RedisStore;
use idemgate::store::{ClaimOutcome, EntityKey, Lease, Releasing, Store, StoreKey};

use crate::support::RedisServer;

const LONG: Duration = Duration::from_secs(60);
const ENTITY: &str = "0123456789abcdef0123456789abcdef";

fn key(n: u8) -> StoreKey {
    StoreKey::for_entity("contract", "pay", &format!("{n:02x}").repeat(32), ENTITY)
}

fn step(to: &str, from: &[&str]) -> EntityStep {
    EntityStep {
        key: EntityKey::new("contract", "pay", ENTITY),
        to: to.to_owned(),
        sources: Sources {
            from: from.iter().map(|s| (*s).to_owned()).collect(),
            initial: true,
        },
        retention: LONG,
    }
}

fn answer() -> RecordState {
    RecordState::Completed(StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: StoredBody::Kept(Bytes::from_static(b"ok")),
    })
}

async fn claim<S: Store>(store: &S, mint: &OwnerMint, n: u8, step: &EntityStep) -> ClaimOutcome {
    let record = Record::in_flight(mint.next(), Fingerprint([n; 32]), None);
    store
        .claim(&key(n), record, LONG, Some(step))
        .await
        .unwrap()
}

async fn claimed<S: Store>(store: &S, mint: &OwnerMint, n: u8, step: &EntityStep) -> Lease {
    match claim(store, mint, n, step).await {
        ClaimOutcome::Claimed(lease) => lease,
        other => panic!("delivery {n}: expected a claim, got {other:?}"),
    }
}

async fn complete<S: Store>(store: &S, lease: &Lease, state: RecordState) {
    let record = lease.record().with_state(state);
    let stored = store
        .complete(lease.key(), lease.owner(), &record, LONG)
        .await
        .unwrap();
    assert!(stored.stored());
}

async fn entity_contract<S: Store>(store: &S) {
    let mint = OwnerMint::new();
    let entity = EntityKey::new("contract", "pay", ENTITY);
    assert!(store.entity(&entity).await.unwrap().is_none());

    // 1: pending, applied by its completion.
    let pending = claimed(store, &mint, 1, &step("pending", &[])).await;
    // 2 (success) while 1 is in flight: busy.
    let success = step("success", &["pending", "failed"]);
    match claim(store, &mint, 2, &success).await {
        ClaimOutcome::Decided(EntityVerdict::Busy { remaining }) => {
            assert!(remaining > Duration::from_secs(50), "{remaining:?}");
        }
        other => panic!("expected busy, got {other:?}"),
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
        claim(store, &mint, 2, &success).await,
        ClaimOutcome::Decided(EntityVerdict::Busy { .. })
    ));
    // The operator purges the unknown record: the change never happened.
    assert!(store.purge(failed.key()).await.unwrap());
    let lease = claimed(store, &mint, 2, &success).await;
    complete(store, &lease, answer()).await;

    // 4 (failed) after the success: refused; 5 (success): a repeat.
    assert_eq!(
        match claim(store, &mint, 4, &step("failed", &["pending"])).await {
            ClaimOutcome::Decided(verdict) => verdict,
            other => panic!("{other:?}"),
        },
        EntityVerdict::Refused {
            from: Some("success".into())
        }
    );
    assert!(matches!(
        claim(store, &mint, 5, &success).await,
        ClaimOutcome::Decided(EntityVerdict::Repeat)
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

#[tokio::test]
async fn redis_store_keeps_the_entity_contract() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), Duration::from_millis(500), None, 1)
        .await
        .unwrap();
    entity_contract(&store).await;
}

#[tokio::test]
async fn embedded_store_keeps_the_entity_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("entity.redb")).unwrap();
    entity_contract(&store).await;
}
