//! Must hold 3: Redis (`appendonly yes`) restarts while deliveries wait in
//! the inbox; every one is still delivered afterwards, once.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_deliveries_survive_a_redis_restart() {
    let _serial = SERIAL.lock().await;
    let mut redis = RedisServer::start_persistent();
    let (port, url) = absent_handler();
    let text = inbox_config(&redis_store(&redis), &url, PATIENT);
    let gate = GateProcess::start(&text);
    let ids: Vec<String> = (0..50).map(|i| format!("aof-{i}")).collect();
    let answers = deliver_copies(&[gate.url("/notify")], &ids, 2).await;
    assert_acknowledged(&answers);
    assert_eq!(listed(gate.admin, "queued").await.len(), 50);

    redis.restart();
    wait_until(Duration::from_secs(10), "redis answers again", || {
        redis.cli(&["PING"]).trim() == "PONG"
    });
    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    drained_once(gate.admin, &handler, &ids, Duration::from_secs(60)).await;
}
