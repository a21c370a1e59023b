//! `/readyz` follows Redis going away and coming back.

use super::*;

/// Polls `readyz` every 100 ms until it answers `status` (at most `limit`);
/// returns how long that took.
async fn readyz_turns(readyz: &str, status: u16, limit: Duration) -> Duration {
    let started = Instant::now();
    poll(
        &format!("/readyz {status}"),
        limit,
        Duration::from_millis(100),
        async || (http_get(readyz).await.ok()?.0 == status).then_some(()),
    )
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_redis() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let readyz = format!("http://{}/readyz", gate.admin);
    readyz_turns(&readyz, 200, Duration::from_secs(10)).await;

    redis.stop();
    let down_after = readyz_turns(&readyz, 503, Duration::from_secs(2)).await;
    println!("/readyz answered 503 {down_after:?} after Redis was killed");
    assert!(down_after <= Duration::from_secs(2), "{down_after:?}");
    let body = payment("ready-1");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(answer.reason().as_deref(), Some("store_unavailable"));

    redis.restart();
    let up_after = readyz_turns(&readyz, 200, Duration::from_secs(15)).await;
    println!("/readyz answered 200 {up_after:?} after Redis was back");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(
        (answer.status, answer.replayed()),
        (200, Some("false")),
        "protection resumes with the store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_means_able_to_claim_not_a_read_only_replica() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config_text(&redis_store(&replica), &upstream.url(), ""));
    let readyz = format!("http://{}/readyz", gate.admin);
    readyz_turns(&readyz, 200, Duration::from_secs(10)).await;

    // The store idemgate talks to becomes a read-only replica: it still
    // answers PING, but every claim would fail.
    let url = primary.url();
    let port = url
        .rsplit(':')
        .next()
        .and_then(|tail| tail.split('/').next())
        .expect("redis://127.0.0.1:<port>/0");
    replica.cli(&["REPLICAOF", "127.0.0.1", port]);
    let down_after = readyz_turns(&readyz, 503, Duration::from_secs(5)).await;
    let (_, why) = http_get(&readyz).await.unwrap();
    println!("/readyz answered 503 {down_after:?} after the store became a replica: {why}");
    assert!(why.contains("not a primary"), "{why}");
    let body = payment("replica-1");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(answer.status, 503, "no claim on a replica");
    assert_eq!(upstream.calls(), 0);

    replica.cli(&["REPLICAOF", "NO", "ONE"]);
    readyz_turns(&readyz, 200, Duration::from_secs(10)).await;
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(answer.status, 200);
}
