//! The entity model (`support::entity_model`) where its faults need whole
//! servers: on a real 6-node Redis Cluster (every entity with all its
//! records in one slot, spread over the primaries), and on a Redis with
//! AOF `always` that the histories restart: nothing acknowledged may be
//! lost or change its verdict.

use idemgate::store::redis::RedisStore;

use super::*;

/// Histories per run: each takes tens of milliseconds on a Cluster.
const CASES: u32 = 64;

#[test]
#[ignore = "needs redis cluster"]
fn the_entity_promise_holds_on_a_redis_cluster() {
    let lane = CLUSTER_LANE.blocking_lock();
    let cluster = Cluster::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(RedisStore::connect(
            &cluster.url(),
            Duration::from_secs(2),
            None,
            1,
        ))
        .unwrap();
    let ran = explore((&store, None), runtime.handle(), 1 << 40, CASES);
    assert_eq!(ran, u64::from(CASES));
    drop(lane);
}

#[test]
fn the_entity_promise_holds_across_redis_restarts_with_aof() {
    let lane = SINGLE_LANE.blocking_lock();
    let redis = Mutex::new(RedisServer::start_persistent());
    let url = redis.lock().unwrap().url();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(RedisStore::connect(&url, Duration::from_secs(2), None, 1))
        .unwrap();
    let restart = || redis.lock().unwrap().restart();
    let ran = explore((&store, Some(&restart)), runtime.handle(), 1 << 44, 24);
    assert!(ran > 0);
    drop(lane);
}
