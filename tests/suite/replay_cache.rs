//! The replay cache (`[limits] replay_cache_bytes`): replays with no store
//! round trip, kept coherent across instances by Redis `CLIENT TRACKING`,
//! flushed when the tracking connection drops, never served past the
//! record's retention — against a real Redis and a real upstream.

use std::time::{Duration, Instant};

use crate::support::*;

const TOKEN: &str = "replay-cache-token";

/// Calls of the scripts idemgate runs (claims, lookups, stores).
fn script_calls(redis: &RedisServer) -> u64 {
    redis.command_counts().get("evalsha").copied().unwrap_or(0)
}

/// The test route on `redis`, with an admin token; `limits` is added to
/// `[limits]`.
fn config(redis: &RedisServer, upstream: &Upstream, limits: &str) -> String {
    config_text(&redis_store(redis), &upstream.url(), "")
        .replace("[limits]\n", &format!("[limits]\n{limits}\n"))
        + &format!("\n[admin]\ntoken = \"literal:{TOKEN}\"\n")
}

/// Delivers `body` until a replay costs no script call: the first replay
/// reads the store and fills the cache in the background.
async fn until_cached(url: &str, body: &str, redis: &RedisServer) {
    poll(
        "a replay answered from the cache",
        Duration::from_secs(5),
        Duration::from_millis(20),
        async || {
            let before = script_calls(redis);
            let answer = deliver(url, body).await;
            assert_eq!(answer.replayed(), Some("true"), "{answer:?}");
            (script_calls(redis) == before).then_some(())
        },
    )
    .await;
}

/// `DELETE /admin/records/pay/{id}` of a completed record on the admin
/// listener at `admin`.
async fn purge(admin: std::net::SocketAddr, id: &str) -> Answer {
    admin_delete(
        admin,
        &format!("/admin/records/pay/{id}?expect_state=completed"),
        TOKEN,
    )
    .await
}

/// The test route on an embedded store at `path`; `extra` is added to the
/// route's `[route.idempotency]`.
fn embedded_config(path: &std::path::Path, upstream: &Upstream, extra: &str) -> String {
    config_text(&embedded_store(path), &upstream.url(), extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_after_the_first_cost_no_store_round_trip() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&config(&redis, &upstream, "")).await;
    let url = gate.url("/notify");
    let body = payment("cached-1");
    let first = deliver(&url, &body).await;
    assert_eq!(first.replayed(), Some("false"));
    until_cached(&url, &body, &redis).await;

    let before = script_calls(&redis);
    for _ in 0..50 {
        let replay = deliver(&url, &body).await;
        assert_eq!(replay.replayed(), Some("true"));
        assert_eq!(replay.body, first.body, "the very same answer");
        assert!(replay.header("age").is_some(), "Age is still set");
    }
    assert_eq!(script_calls(&redis), before, "50 replays, no script call");
    // A reused key with another body is refused from the cache as well.
    let refused = deliver(&url, &body.replace("10.00", "11.00")).await;
    assert_eq!(refused.status, 422, "{refused:?}");
    assert_eq!(script_calls(&redis), before, "decided from the cache");
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cache_off_every_replay_reads_the_store() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&config(&redis, &upstream, "replay_cache_bytes = 0")).await;
    let url = gate.url("/notify");
    let body = payment("uncached-1");
    deliver(&url, &body).await;
    deliver(&url, &body).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = script_calls(&redis);
    for _ in 0..5 {
        assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));
    }
    assert_eq!(script_calls(&redis), before + 5, "one claim per replay");
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_on_one_instance_is_seen_by_another_at_once() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config(&redis, &upstream, "");
    let a = Gate::start(&text).await;
    let b = Gate::start(&text).await;
    let body = payment("purged-1");
    assert_eq!(
        deliver(&a.url("/notify"), &body).await.replayed(),
        Some("false")
    );
    until_cached(&b.url("/notify"), &body, &redis).await;

    let purge = purge(a.admin, "purged-1").await;
    assert_eq!(purge.status, 204, "{purge:?}");
    let purged = Instant::now();
    // B forwards the next copy as a first delivery as soon as the
    // invalidation arrived; until then it may replay (never execute twice).
    let forwarded = poll(
        "instance B forwarding after the purge",
        Duration::from_secs(2),
        Duration::from_millis(1),
        async || {
            let answer = deliver(&b.url("/notify"), &body).await;
            (answer.replayed() == Some("false")).then(|| purged.elapsed())
        },
    )
    .await;
    println!(
        "[replay_cache] purge on A seen by B after {:.2} ms",
        forwarded.as_secs_f64() * 1000.0
    );
    assert_eq!(upstream.calls(), 2, "forwarded again exactly once");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_behind_idemgates_back_is_invalidated_too() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&config(&redis, &upstream, "")).await;
    let url = gate.url("/notify");
    let body = payment("deleted-1");
    deliver(&url, &body).await;
    until_cached(&url, &body, &redis).await;
    let keys = redis.keys("idemgate:pay:*");
    assert_eq!(keys.len(), 1);
    redis.cli(&["DEL", &keys[0]]);
    poll(
        "the deleted key forwarded again",
        Duration::from_secs(2),
        Duration::from_millis(5),
        async || (deliver(&url, &body).await.replayed() == Some("false")).then_some(()),
    )
    .await;
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_answer_is_never_served_after_its_retention() {
    // The embedded store has no tracking: only the local expiry can end
    // the entry, so this fails if the cache ignored the retention.
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let text = embedded_config(
        &dir.path().join("claims.redb"),
        &upstream,
        "lease = \"1s\"\nunknown_hold = \"1s\"",
    )
    .replace("retention = \"1h\"", "retention = \"3s\"")
    // The retention must outlast the signature tolerance; 2 s rather than
    // 1 s so that a whole-second timestamp signed just before a second
    // turns is not refused as stale on a loaded machine.
    .replace("tolerance = \"5m\"", "tolerance = \"2s\"");
    let gate = Gate::start(&text).await;
    let url = gate.url("/notify");
    let body = payment("retention-1");
    let stored_at = Instant::now();
    assert_eq!(deliver(&url, &body).await.replayed(), Some("false"));
    // Replays until the retention is nearly over (cached after the first).
    while stored_at.elapsed() < Duration::from_millis(2_500) {
        let replay = deliver(&url, &body).await;
        assert_eq!(replay.replayed(), Some("true"), "{replay:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The record was stored a little after `stored_at`: leave it a margin.
    tokio::time::sleep(Duration::from_millis(3_500).saturating_sub(stored_at.elapsed())).await;
    let after = deliver(&url, &body).await;
    assert_eq!(
        after.replayed(),
        Some("false"),
        "retention over: a new first delivery: {after:?}"
    );
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_on_the_embedded_store_drops_the_cached_answer() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let text = embedded_config(&dir.path().join("claims.redb"), &upstream, "")
        + &format!("\n[admin]\ntoken = \"literal:{TOKEN}\"\n");
    let gate = Gate::start(&text).await;
    let url = gate.url("/notify");
    let body = payment("embedded-purge");
    deliver(&url, &body).await;
    for _ in 0..3 {
        assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));
    }
    let purge = purge(gate.admin, "embedded-purge").await;
    assert_eq!(purge.status, 204);
    assert_eq!(deliver(&url, &body).await.replayed(), Some("false"));
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

/// The id of idemgate's tracking connection (`CLIENT LIST` flag `t`).
fn tracking_client_id(redis: &RedisServer) -> Option<String> {
    redis.cli(&["CLIENT", "LIST"]).lines().find_map(|line| {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|part| part.strip_prefix(name))
                .map(str::to_owned)
        };
        field("flags=")
            .is_some_and(|flags| flags.contains('t'))
            .then(|| field("id="))
            .flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_tracking_connection_flushes_the_cache() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config(&redis, &upstream, ""));
    let url = gate.url("/notify");
    let body = payment("flushed-1");
    deliver(&url, &body).await;
    until_cached(&url, &body, &redis).await;
    let flushes = "idemgate_replay_cache_flushes_total{reason=\"disconnected\"}";
    let before = metric(gate.admin, flushes).await.expect("flush counter");
    assert!(metric(gate.admin, "idemgate_replay_cache_bytes").await > Some(0.0));
    let hits = metric(gate.admin, "idemgate_replay_cache_hits_total").await;
    assert!(hits >= Some(1.0), "{hits:?}");

    let id = tracking_client_id(&redis).expect("a tracking connection");
    redis.cli(&["CLIENT", "KILL", "ID", &id]);
    poll(
        "the flush",
        Duration::from_secs(3),
        Duration::from_millis(10),
        async || (metric(gate.admin, flushes).await > Some(before)).then_some(()),
    )
    .await;
    assert_eq!(
        metric(gate.admin, "idemgate_replay_cache_bytes").await,
        Some(0.0),
        "emptied"
    );
    // The next replay reads the store again; then the cache refills over
    // the new, tracked connection.
    let misses = metric(gate.admin, "idemgate_replay_cache_misses_total").await;
    until_cached(&url, &body, &redis).await;
    assert!(metric(gate.admin, "idemgate_replay_cache_misses_total").await > misses);
    let new_id = tracking_client_id(&redis).expect("tracking again");
    assert_ne!(new_id, id, "a new connection");
    assert_eq!(upstream.calls(), 1);
}

/// After `command` (run with redis-cli) empties the store behind
/// idemgate's back, an instance whose cache holds the answer must stop
/// replaying it: the store no longer has the record, so the next copy is a
/// first delivery again (Redis tells the tracking client nothing fred
/// passes on; the epoch check sees it within its 1 s health interval).
async fn a_flush_reaches_the_cache(command: &[&str]) {
    let redis = RedisServer::start();
    let upstream =
        Upstream::scripted(|n, _| Reply::with_body(bytes::Bytes::from(format!("answer-{n}"))))
            .await;
    let text = config(&redis, &upstream, "");
    let a = Gate::start(&text).await;
    let b = Gate::start(&text).await;
    let body = payment("flushed-1");
    let first = deliver(&a.url("/notify"), &body).await;
    assert_eq!(&first.body[..], b"answer-0");
    until_cached(&b.url("/notify"), &body, &redis).await;
    // Let each instance's health check see the epoch marker once.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    redis.cli(command);
    let flushed = Instant::now();
    let seen = poll(
        "instance B forwarding the emptied key",
        Duration::from_secs(4),
        Duration::from_millis(20),
        async || {
            let answer = deliver(&b.url("/notify"), &body).await;
            (answer.replayed() == Some("false")).then(|| (flushed.elapsed(), answer))
        },
    )
    .await;
    assert_eq!(&seen.1.body[..], b"answer-1");
    println!(
        "[replay_cache] {command:?} seen by the cache after {:?}",
        seen.0
    );
    let replay = deliver(&a.url("/notify"), &body).await;
    assert_eq!(&replay.body[..], b"answer-1", "A replays the new answer");
    assert_eq!(upstream.calls(), 2);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_empties_every_instances_cache() {
    a_flush_reaches_the_cache(&["FLUSHALL"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapdb_empties_every_instances_cache() {
    a_flush_reaches_the_cache(&["SWAPDB", "0", "1"]).await;
}
