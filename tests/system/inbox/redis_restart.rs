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

/// A Redis without persistence restarts and loses the queued deliveries
/// together with their books, so the books still balance (at zero). What
/// each instance counted as acknowledged stays, and shows the loss
/// (`IdemgateInboxBooksLost` compares the two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn books_lost_with_the_store_are_seen_against_the_acknowledged_count() {
    let _serial = SERIAL.lock().await;
    let mut redis = RedisServer::start();
    let (_port, url) = absent_handler();
    let text = inbox_config(&redis_store(&redis), &url, PATIENT);
    let gate = GateProcess::start(&text);
    let ids: Vec<String> = (0..20).map(|i| format!("lost-books-{i}")).collect();
    let answers = deliver_copies(&[gate.url("/notify")], &ids, 1).await;
    assert_acknowledged(&answers);
    let counted = "idemgate_inbox_acknowledged_total{route=\"pay\"}";
    let books = "idemgate_inbox_books{route=\"pay\",line=\"acknowledged\"}";
    poll(
        "the books and the count to agree",
        Duration::from_secs(15),
        Duration::from_millis(200),
        async || {
            let both = (
                metric(gate.admin, books).await,
                metric(gate.admin, counted).await,
            );
            (both == (Some(20.0), Some(20.0))).then_some(())
        },
    )
    .await;

    redis.restart();
    wait_until(Duration::from_secs(10), "redis answers again", || {
        redis.cli(&["PING"]).trim() == "PONG"
    });
    poll(
        "the books read again from the emptied store",
        Duration::from_secs(15),
        Duration::from_millis(200),
        async || (metric(gate.admin, books).await == Some(0.0)).then_some(()),
    )
    .await;
    assert_eq!(
        metric(gate.admin, counted).await,
        Some(20.0),
        "the instance's own count keeps what it acknowledged"
    );
}
