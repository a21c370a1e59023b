//! A Redis that may evict keys (docs/contract.md §4 rule 10), against
//! a real `redis-server` and the real `idemgate` binary (its `/metrics`
//! needs the global recorder).
//!
//! `maxmemory` with any policy but `noeviction` fails `/readyz` unless
//! `[store] allow_eviction = true`, raises `idemgate_store_eviction_risk`,
//! logs an ERROR naming the node and policy, and counts what Redis's
//! `evicted_keys` newly reports, across a reset of it. The last test shows the failure all this warns about: a
//! completed record evicted, and its duplicate executed again.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

const RISK: &str = "idemgate_store_eviction_risk";
const EVICTED: &str = "idemgate_store_evicted_keys_total";

fn gate_on(redis: &RedisServer, upstream: &Upstream, store_extra: &str, log: &Path) -> GateProcess {
    let store = format!("{}\n{store_extra}", redis_store(redis));
    GateProcess::launch(&config_text(&store, &upstream.url(), ""), &[], Some(log))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_policies_fail_readyz_raise_the_gauge_and_log_the_node() {
    let upstream = Upstream::start().await;
    for policy in ["allkeys-lru", "volatile-lru"] {
        let redis = RedisServer::start();
        redis.config_set("maxmemory", "10mb");
        redis.config_set("maxmemory-policy", policy);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("idemgate.log");
        let gate = gate_on(&redis, &upstream, "", &log);

        let body = readyz_becomes(gate.admin, 503).await;
        assert!(
            body.contains(policy) && body.contains(&format!("127.0.0.1:{}", redis.port)),
            "{policy}: {body}"
        );
        assert_eq!(metric(gate.admin, RISK).await, Some(1.0), "{policy}");
        let node = format!("node=\"127.0.0.1:{}\"", redis.port);
        log_with_line(&log, &format!("ERROR naming {node} and {policy}"), |line| {
            line.contains("ERROR")
                && line.contains(&node)
                && line.contains(&format!("policy=\"{policy}\""))
        })
        .await;
        // Deliveries are still served: readiness is for the load balancer.
        let answer = deliver(&gate.url("/notify"), &payment(policy)).await;
        assert_eq!(answer.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_or_no_limit_is_ready() {
    let upstream = Upstream::start().await;
    for (maxmemory, policy) in [("10mb", "noeviction"), ("0", "allkeys-lru")] {
        let redis = RedisServer::start();
        redis.config_set("maxmemory", maxmemory);
        redis.config_set("maxmemory-policy", policy);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("idemgate.log");
        let gate = gate_on(&redis, &upstream, "", &log);
        let (status, body) = admin_get(gate.admin, "/readyz").await;
        assert_eq!(status, 200, "maxmemory {maxmemory} {policy}: {body}");
        assert_eq!(metric(gate.admin, RISK).await, Some(0.0));
        assert_eq!(metric(gate.admin, EVICTED).await, Some(0.0));
        assert!(!log_text(&log).contains("may evict"), "{}", log_text(&log));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_eviction_keeps_readyz_but_not_the_gauge() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start();
    redis.config_set("maxmemory", "10mb");
    redis.config_set("maxmemory-policy", "allkeys-lru");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = gate_on(&redis, &upstream, "allow_eviction = true", &log);
    let (status, body) = admin_get(gate.admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(metric(gate.admin, RISK).await, Some(1.0));
    log_with_line(&log, "ERROR about the risk", |line| {
        line.contains("ERROR") && line.contains("allow_eviction = true")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_changed_at_runtime_is_picked_up() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start();
    redis.config_set("maxmemory", "10mb");
    redis.config_set("maxmemory-policy", "noeviction");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = gate_on(&redis, &upstream, "", &log);
    readyz_becomes(gate.admin, 200).await;
    assert_eq!(metric(gate.admin, RISK).await, Some(0.0));

    // No restart, no minute to wait: the next probe sees the new policy.
    redis.config_set("maxmemory-policy", "volatile-ttl");
    let body = readyz_becomes(gate.admin, 503).await;
    assert!(body.contains("volatile-ttl"), "{body}");
    assert_eq!(metric(gate.admin, RISK).await, Some(1.0));

    redis.config_set("maxmemory", "0");
    readyz_becomes(gate.admin, 200).await;
    assert_eq!(metric(gate.admin, RISK).await, Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_record_executes_again_and_readyz_said_so_beforehand() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start();
    redis.config_set("maxmemory", "3mb");
    redis.config_set("maxmemory-policy", "allkeys-lru");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = gate_on(&redis, &upstream, "", &log);

    // The warning comes first: not ready, risk 1, nothing evicted yet.
    readyz_becomes(gate.admin, 503).await;
    assert_eq!(metric(gate.admin, RISK).await, Some(1.0));
    assert_eq!(metric(gate.admin, EVICTED).await, Some(0.0));

    let body = payment("evicted-1");
    let first = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    let replay = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(replay.replayed(), Some("true"));
    let records = redis.keys("idemgate:pay:*");
    assert_eq!(records.len(), 1, "{records:?}");

    // Redis fills up with other data and evicts the completed record.
    let evicted = redis.fill_with_junk(200, |redis| {
        redis.cli(&["EXISTS", &records[0]]).trim() == "0"
    });
    assert!(evicted, "the record was never evicted");
    let evicted_keys = redis.evicted_keys();
    assert!(evicted_keys > 0);

    // The mirror follows Redis's own counter (read on the next check; a
    // probe triggers one).
    readyz_becomes(gate.admin, 503).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mirrored = metric(gate.admin, EVICTED).await.unwrap_or(0.0);
        if mirrored >= evicted_keys as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{EVICTED} {mirrored} < {evicted_keys}"
        );
        admin_get(gate.admin, "/readyz").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The promise break readiness warned about: the duplicate executes.
    let again = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((again.status, again.replayed()), (200, Some("false")));
    assert_eq!(
        upstream.calls(),
        2,
        "an evicted record lets the key run twice"
    );

    // Redis's own counter going back to 0 (a restart; here CONFIG
    // RESETSTAT) is not a drop of ours: what it counts afterwards adds on.
    let counted = metric(gate.admin, EVICTED).await.unwrap_or(0.0);
    redis.reset_stats();
    admin_get(gate.admin, "/readyz").await; // a check reads the reset
    assert!(
        redis.fill_with_junk(200, |redis| redis.evicted_keys() > 0),
        "nothing evicted after the reset"
    );
    let after_reset = redis.evicted_keys();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        admin_get(gate.admin, "/readyz").await;
        let total = metric(gate.admin, EVICTED).await.unwrap_or(0.0);
        assert!(total >= counted, "{EVICTED} went down: {total} < {counted}");
        if total >= counted + after_reset as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{EVICTED} {total} < {counted} + {after_reset}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "evicted_keys {evicted_keys}, then {after_reset} after a reset; the duplicate of an \
         evicted record executed again, /readyz was 503 and {RISK} 1 from start-up"
    );
}
