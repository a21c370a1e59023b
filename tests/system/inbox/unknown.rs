//! `"timeout"` in `on`: a live attempt that timed out is acknowledged,
//! then `on_upstream_timeout` decides. `hold` keeps it for the operator and
//! never resends it; `release` queues it again (at-least-once, for handlers
//! that are safe to repeat).

use super::*;

/// The inbox test configuration with a 1 s handler timeout, `"timeout"`
/// in `on` and `on_upstream_timeout` as given.
fn timing_out(store: &str, handler: &str, on_timeout: &str) -> String {
    let text = inbox_config(
        store,
        handler,
        "on = [\"5xx\", \"refused\", \"timeout\"]\nbackoff = \"300ms\"\nmax_backoff = \"2s\"\nvisibility_timeout = \"3s\"",
    )
    .replace("timeout = \"5s\"", "timeout = \"1s\"");
    text.replace(
        "[route.inbox]",
        &format!("on_upstream_timeout = \"{on_timeout}\"\n\n[route.inbox]"),
    )
}

/// Waits (bounded) until the dead gauge, refreshed every 5 s, shows `value`.
async fn dead_gauge(admin: SocketAddr, value: f64) {
    let series = "idemgate_inbox_dead{route=\"pay\"}";
    poll(
        series,
        Duration::from_secs(8),
        Duration::from_millis(200),
        async || (metric(admin, series).await == Some(value)).then_some(()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_delivery_is_acknowledged_and_held_never_resent() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let handler = Upstream::slow_first(Duration::from_secs(2)).await;
    let gate = GateProcess::start(&timing_out(&redis_store(&redis), &handler.url(), "hold"));
    let first = Sender::new()
        .deliver(&gate.url("/notify"), &payment("slow"))
        .await
        .unwrap();
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    assert_eq!(&first.body[..], ACK.as_bytes());
    let view = delivery(gate.admin, "slow").await;
    assert_eq!(view["state"], "unknown", "{view}");
    assert_eq!(listed(gate.admin, "dead").await.len(), 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(handler.calls(), 1, "held, never resent by itself");
    let copy = Sender::new()
        .deliver(&gate.url("/notify"), &payment("slow"))
        .await
        .unwrap();
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));

    assert_eq!(
        metric(gate.admin, "idemgate_unknown_outcomes_total{route=\"pay\"}").await,
        Some(1.0)
    );
    dead_gauge(gate.admin, 1.0).await;

    let (status, _) = admin(
        gate.admin,
        "POST",
        "/admin/inbox/pay/retry?key=slow&expect_state=unknown",
    )
    .await;
    assert_eq!(status, 200);
    let view = until_state(gate.admin, "slow", "delivered").await;
    assert_eq!(view["attempts"], 1, "{view}");
    assert_eq!(handler.calls(), 2, "the operator's retry sent it once");
    let delivered = "idemgate_inbox_redeliveries_total{route=\"pay\",result=\"delivered\"}";
    assert_eq!(metric(gate.admin, delivered).await, Some(1.0));
    dead_gauge(gate.admin, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_release_a_timed_out_delivery_is_queued_and_sent_again() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let handler = Upstream::slow_first(Duration::from_secs(2)).await;
    let gate = GateProcess::start(&timing_out(&redis_store(&redis), &handler.url(), "release"));
    let first = Sender::new()
        .deliver(&gate.url("/notify"), &payment("again"))
        .await
        .unwrap();
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    let view = until_state(gate.admin, "again", "delivered").await;
    assert_eq!(view["attempts"], 1, "{view}");
    assert_eq!(
        handler.calls(),
        2,
        "at-least-once: the live attempt and one redelivery"
    );
}
