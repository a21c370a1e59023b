//! Must hold 1 (and 7 on the embedded store): the handler refuses
//! connections for 10 s while deliveries arrive, each three times; every
//! copy is acknowledged, and once the handler is back each delivery
//! executes exactly once and nothing stays queued.

use super::*;

/// Sends `count` deliveries three times each over `gates` while the
/// handler is down for `down`, then starts it and waits for the inbox to
/// drain. Returns the handler.
async fn down_then_back(
    gates: &[GateProcess],
    port: u16,
    count: usize,
    down: Duration,
) -> Upstream {
    let started = Instant::now();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    let ids: Vec<String> = (0..count).map(|i| format!("down-{i}")).collect();
    let answers = deliver_copies(&urls, &ids, 3).await;
    let acknowledged = started.elapsed();
    assert_acknowledged(&answers);
    let queued = listed(gates[0].admin, "queued").await.len();
    assert!(
        queued > 0,
        "deliveries wait in the inbox while the handler is down"
    );
    tokio::time::sleep(down.saturating_sub(started.elapsed())).await;

    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    let drained = Instant::now();
    drained_once(gates[0].admin, &handler, &ids, Duration::from_secs(60)).await;
    println!(
        "{count} deliveries x3 acknowledged in {acknowledged:?} while the handler was down; drained {:?} after it came back",
        drained.elapsed()
    );
    handler
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_deliver_every_acknowledged_delivery_once_after_the_handler_returns() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let (port, url) = absent_handler();
    let text = inbox_config(&redis_store(&redis), &url, PATIENT);
    let gates = [GateProcess::start(&text), GateProcess::start(&text)];
    let handler = down_then_back(&gates, port, 200, Duration::from_secs(10)).await;

    let view = delivery(gates[1].admin, "down-7").await;
    assert_eq!(view["state"], "delivered", "{view}");
    assert_eq!(view["last_answer"]["status"], 200, "{view}");
    assert!(view["attempts"].as_u64().unwrap() >= 1, "{view}");
    // A late copy still gets the first ack, and executes nothing.
    let late = Sender::new()
        .deliver(&gates[1].url("/notify"), &payment("down-7"))
        .await
        .unwrap();
    assert_eq!((late.status, late.replayed()), (200, Some("true")));
    assert_eq!(&late.body[..], ACK.as_bytes());
    assert_eq!(handler.calls(), 200);
    let dead = listed(gates[0].admin, "dead").await;
    assert!(dead.is_empty(), "nothing dead: {dead:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_delivers_every_acknowledged_delivery_once() {
    let _serial = SERIAL.lock().await;
    let (_dir, store) = temp_embedded_store();
    let (port, url) = absent_handler();
    let text = inbox_config(&store, &url, PATIENT);
    let gate = [GateProcess::start(&text)];
    down_then_back(&gate, port, 60, Duration::from_secs(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_deliveries_survive_an_idemgate_restart_on_the_embedded_store() {
    let _serial = SERIAL.lock().await;
    let (_dir, store) = temp_embedded_store();
    let (port, url) = absent_handler();
    let text = inbox_config(&store, &url, PATIENT);
    let ids: Vec<String> = (0..20).map(|i| format!("restart-{i}")).collect();
    let mut first = GateProcess::start(&text);
    assert_acknowledged(&deliver_copies(&[first.url("/notify")], &ids, 1).await);
    assert!(first.terminate().success(), "a clean stop");

    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    let second = GateProcess::start(&text);
    drained_once(second.admin, &handler, &ids, Duration::from_secs(30)).await;
}
