//! A store under pressure keeps the promise (docs/contract.md §4 rule 10):
//! a Redis that is full still replays what it holds, and an answer in hand
//! is stored even when the store refuses it for longer than a lease, or is
//! down for longer than the old retry budget. Real redis-server, real
//! upstream; `CONFIG SET maxmemory 1` makes Redis refuse every write that
//! needs memory (noeviction, the default policy).

use std::time::Duration;

use idemgate::record::{Fingerprint, OwnerToken, Record};

use crate::support::{
    redis_store_timing_out,
    Gate, GateProcess, RedisServer, Reply, Upstream, admin_get, config_text, deliver,
    deliver_while_upstream_works, eventually, payment, redis_store, sample,
};

/// Short claims: a lost answer would let the key run again within seconds.
const SHORT_LEASE: &str = "lease = \"1s\"\nunknown_hold = \"1s\"";

/// Redis refuses every write that needs memory until `CONFIG SET maxmemory 0`.
fn fill(redis: &RedisServer) {
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(), "OK");
}

fn unfill(redis: &RedisServer) {
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "0"]).trim(), "OK");
}

/// A retry of `body` is replayed, and the upstream ran it once.
async fn assert_replayed_once(gate: &Gate, body: &str, upstream: &Upstream) {
    let retry = deliver(&gate.url("/notify"), body).await;
    assert_eq!(
        (retry.status, retry.replayed()),
        (200, Some("true")),
        "{retry:?}"
    );
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_still_replays_what_it_holds() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let closed = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let open = Gate::start(&config_text(
        &redis_store(&redis),
        &upstream.url(),
        "on_unavailable = \"forward\"",
    ))
    .await;
    let held = payment("p-held");
    assert_eq!(
        deliver(&closed.url("/notify"), &held).await.replayed(),
        Some("false")
    );
    fill(&redis);

    // Duplicates of a key the full store holds are replayed, on either policy.
    for gate in [&closed, &open] {
        let again = deliver(&gate.url("/notify"), &held).await;
        assert_eq!(
            (again.status, again.replayed()),
            (200, Some("true")),
            "{again:?}"
        );
    }
    assert_eq!(
        upstream.calls(),
        1,
        "no duplicate of a held key was forwarded"
    );

    // Only new keys follow on_unavailable.
    let fresh = deliver(&closed.url("/notify"), &payment("p-fresh")).await;
    assert_eq!(
        (fresh.status, fresh.reason().as_deref()),
        (503, Some("store_unavailable"))
    );
    assert!(fresh.header("retry-after").is_some());
    let unprotected = deliver(&open.url("/notify"), &payment("p-open")).await;
    assert_eq!(
        (unprotected.status, unprotected.replayed()),
        (200, Some("false"))
    );
    assert_eq!(upstream.calls(), 2);

    unfill(&redis);
    let later = deliver(&closed.url("/notify"), &payment("p-fresh")).await;
    assert_eq!((later.status, later.replayed()), (200, Some("false")));
    closed.stop().await;
    open.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_refused_by_a_full_store_is_stored_once_it_has_room() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(800))).await;
    let gate = Gate::start(&config_text(
        &redis_store(&redis),
        &upstream.url(),
        SHORT_LEASE,
    ))
    .await;
    let body = payment("p-oom");
    let first = deliver_while_upstream_works(gate.url("/notify"), &body, &upstream, 1).await;
    fill(&redis);
    // The sender is not held while the store refuses the answer.
    let answer = tokio::time::timeout(Duration::from_secs(2), first)
        .await
        .expect("the sender gets its answer while the store is full")
        .unwrap();
    assert_eq!((answer.status, answer.replayed()), (200, Some("false")));
    // Full for longer than lease + unknown_hold (2 s): had the claim been
    // left in flight, it would have turned unknown and then expired.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    unfill(&redis);
    let stored = eventually(Duration::from_secs(3), || {
        redis
            .keys("idemgate:pay:*")
            .first()
            .is_some_and(|key| redis.cli(&["GETRANGE", key, "1", "1"]).starts_with('\u{2}'))
    })
    .await;
    assert!(stored, "the answer was stored once Redis had room");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_replayed_once(&gate, &body, &upstream).await;
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_outlives_a_restart_longer_than_its_claim() {
    let mut redis = RedisServer::start_persistent();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(800))).await;
    // A short store timeout: the sender is answered once one store attempt
    // has failed, which this test times.
    let gate = Gate::start(&config_text(
        &redis_store_timing_out(&redis, "250ms"),
        &upstream.url(),
        "lease = \"2s\"\nunknown_hold = \"2s\"",
    ))
    .await;
    let body = payment("p-restart");
    let first = deliver_while_upstream_works(gate.url("/notify"), &body, &upstream, 1).await;
    redis.stop();
    let answer = tokio::time::timeout(Duration::from_secs(3), first)
        .await
        .expect("the sender gets its answer while the store is down")
        .unwrap();
    assert_eq!(answer.status, 200);
    // Down for 5.5 s (a restart replaying a large AOF): past the claim's
    // 4 s TTL, so it is gone when Redis is back, and past the ~3 s the
    // store write used to be retried for.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    redis.restart();
    // The answer takes the free key as soon as idemgate reconnects. (A
    // retry that arrived before that would find the key free: the gap the
    // docs/guarantees.md names for claims lost with the store.)
    let stored = eventually(Duration::from_secs(5), || {
        !redis.keys("idemgate:pay:*").is_empty()
    })
    .await;
    assert!(stored, "the answer was stored after the restart");
    assert_replayed_once(&gate, &body, &upstream).await;
    gate.stop().await;
}

/// A store that comes back empty (a restart without persistence) while an
/// answer is in hand: copies sent here as soon as it is back never claim
/// the free key, they wait or get 409 until the answer is stored, then
/// get it. Without the in-hand guard a copy that beat the next store
/// attempt ran the delivery again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_never_claim_a_key_whose_answer_is_in_hand() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(800))).await;
    let gate = Gate::start(&config_text(
        &redis_store(&redis),
        &upstream.url(),
        "on_in_flight = \"conflict\"",
    ))
    .await;
    let body = payment("p-in-hand");
    let first = deliver_while_upstream_works(gate.url("/notify"), &body, &upstream, 1).await;
    redis.stop();
    let answer = first.await.unwrap();
    assert_eq!(answer.status, 200, "the sender gets its answer: {answer:?}");
    // Let the store attempts back off towards their 1 s pause, then bring
    // the store back empty and send copies at once, every 20 ms.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart();
    let mut statuses = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < deadline {
        let copy = deliver(&gate.url("/notify"), &body).await;
        statuses.push(copy.status);
        if copy.replayed() == Some("true") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        upstream.calls(),
        1,
        "no copy ran the delivery again; statuses {statuses:?}"
    );
    assert_eq!(
        statuses.last(),
        Some(&200),
        "the copies got the answer: {statuses:?}"
    );
    gate.stop().await;
}

/// A give-up is an unknown outcome: counted, and logged with the key an
/// operator can paste into the admin API. Here another owner's claim
/// replaces ours while the upstream works (as after a store that lost the
/// claim and let a retry take the key), so the answer finds the key taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_finds_its_key_taken_is_an_unknown_outcome() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(800))).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(
        &config_text(&redis_store(&redis), &upstream.url(), ""),
        &[],
        Some(&log),
    );
    let first =
        deliver_while_upstream_works(gate.url("/notify"), &payment("p-taken"), &upstream, 1).await;
    let keys = redis.keys("idemgate:pay:*");
    let [key] = keys.as_slice() else {
        panic!("one claim expected: {keys:?}")
    };
    let foreign = Record::in_flight(OwnerToken([9; 16]), Fingerprint([0; 32]), None);
    redis.set_bytes(key, &foreign.encode().unwrap());
    assert_eq!(first.await.unwrap().status, 200);

    let counted = async {
        for _ in 0..50 {
            let (_, text) = admin_get(gate.admin, "/metrics").await;
            if sample(&text, "idemgate_unknown_outcomes_total{route=\"pay\"}") == Some(1.0) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(
        counted.await,
        "the give-up is counted as an unknown outcome"
    );
    // Log lines are written in batches: give the batch time to land.
    let mut line = None;
    for _ in 0..30 {
        let lines = std::fs::read_to_string(&log).unwrap();
        line = lines
            .lines()
            .find(|l| l.contains("outcome unknown") && l.contains("another delivery holds the key"))
            .map(str::to_owned);
        if line.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let line = line.unwrap_or_else(|| {
        panic!(
            "the give-up is logged: {}",
            std::fs::read_to_string(&log).unwrap()
        )
    });
    let hash = key.rsplit(':').next().unwrap();
    assert!(
        line.contains(&format!("key=\"{hash}\"")),
        "the line names the key as the bare hash the admin API takes: {line}"
    );
    let stored = Record::decode(&bytes::Bytes::from(redis.get_bytes(key))).unwrap();
    assert_eq!(stored, foreign, "the other owner's record is left alone");
    drop(gate);
}

/// Only shutdown cuts the retries short: when the grace period ends with
/// an answer still not stored, it is given up as an unknown outcome —
/// logged — and the process exits instead of retrying forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_up_an_unstored_answer_and_says_so() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(500))).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    // The store timeout well inside the grace period: the retries' last
    // failure is the unreachable store, not a reply still awaited.
    let text = config_text(&redis_store_timing_out(&redis, "250ms"), &upstream.url(), "")
        .replace("shutdown_grace = \"5s\"", "shutdown_grace = \"1s\"");
    let mut gate = GateProcess::launch(&text, &[], Some(&log));
    let first =
        deliver_while_upstream_works(gate.url("/notify"), &payment("p-shutdown"), &upstream, 1)
            .await;
    redis.stop();
    assert_eq!(first.await.unwrap().status, 200);
    let stopping = std::time::Instant::now();
    let status = gate.terminate();
    let took = stopping.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(4),
        "shutdown waited {took:?} for a store that never came back"
    );
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines
            .lines()
            .any(|l| l.contains("outcome unknown") && l.contains("store unreachable")),
        "the give-up is logged: {lines}"
    );
}
