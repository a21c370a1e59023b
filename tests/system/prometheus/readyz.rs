//! `/readyz` follows Redis going away and coming back.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_redis() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let readyz = format!("http://{}/readyz", gate.admin);
    let status = async || http_get(&readyz).await.map(|(s, _)| s).ok();

    poll(
        "/readyz 200",
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || (status().await? == 200).then_some(()),
    )
    .await;

    redis.stop();
    let stopped = Instant::now();
    poll(
        "/readyz 503 after Redis stopped",
        Duration::from_secs(2),
        Duration::from_millis(100),
        async || (status().await? == 503).then_some(()),
    )
    .await;
    let down_after = stopped.elapsed();
    println!("/readyz answered 503 {down_after:?} after Redis was killed");
    assert!(down_after <= Duration::from_secs(2), "{down_after:?}");
    let body = payment("ready-1");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(answer.reason().as_deref(), Some("store_unavailable"));

    redis.restart();
    let restarted = Instant::now();
    poll(
        "/readyz 200 after Redis restarted",
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || (status().await? == 200).then_some(()),
    )
    .await;
    let up_after = restarted.elapsed();
    println!("/readyz answered 200 {up_after:?} after Redis was back");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(
        (answer.status, answer.replayed()),
        (200, Some("false")),
        "protection resumes with the store"
    );
}
