//! Nothing acknowledged is lost or miscounted (docs/contract.md §4,
//! rule 13): a backlog or an outage longer than `retention` keeps every
//! delivery; a redelivery the handler refuses is a failed attempt, not
//! "delivered"; a redelivery carries what the live attempt carried; a full
//! inbox stops acknowledging instead of dropping; the record API purges an
//! inbox delivery only as the inbox's own drop would.

use super::*;

/// The inbox test configuration with a `retention` of 4 s (so a 3 s
/// signature tolerance), a 2 s handler timeout and `inbox` settings.
fn short_retention(store: &str, handler: &str, inbox: &str) -> String {
    inbox_config(store, handler, inbox)
        .replace("retention = \"1h\"", "retention = \"4s\"")
        .replace("tolerance = \"5m\"", "tolerance = \"3s\"")
        .replace("timeout = \"5s\"", "timeout = \"2s\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_older_than_retention_is_delivered_once() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let (port, url) = absent_handler();
    // One redelivery at a time, each 1.5 s: draining ten takes ~15 s,
    // almost four retentions.
    let text = short_retention(
        &redis_store(&redis),
        &url,
        "backoff = \"100ms\"\nmax_backoff = \"1s\"\nmax_attempts = 100\nconcurrency = 1\nvisibility_timeout = \"3s\"",
    );
    let gate = GateProcess::start(&text);
    let ids: Vec<String> = (0..10).map(|i| format!("backlog-{i}")).collect();
    assert_acknowledged(&deliver_copies(&[gate.url("/notify")], &ids, 1).await);
    let handler =
        Upstream::scripted_at(port, |_, _| Reply::slow(Duration::from_millis(1500))).await;
    let started = Instant::now();
    drained_once(gate.admin, &handler, &ids, Duration::from_secs(60)).await;
    println!(
        "10 queued deliveries, retention 4 s, drained one at a time in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_retention_keeps_the_queue_on_the_embedded_store() {
    let _serial = SERIAL.lock().await;
    let (_dir, store) = temp_embedded_store();
    let (port, url) = absent_handler();
    let text = short_retention(
        &store,
        &url,
        "backoff = \"100ms\"\nmax_backoff = \"1s\"\nmax_attempts = 100\nvisibility_timeout = \"3s\"",
    );
    let ids: Vec<String> = (0..20).map(|i| format!("outage-{i}")).collect();
    let mut first = GateProcess::start(&text);
    assert_acknowledged(&deliver_copies(&[first.url("/notify")], &ids, 1).await);
    assert!(first.terminate().success(), "a clean stop");
    // idemgate is down for longer than the retention.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    let second = GateProcess::start(&text);
    drained_once(second.admin, &handler, &ids, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_redelivery_fails_and_carries_what_the_live_attempt_carried() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    // The live attempt gets 503 (queued); every redelivery 401, as a
    // handler that allow-lists its gateway's addresses would answer a
    // request without them. 401 is in the default cache_status.
    let handler = Upstream::scripted(|n, _| Reply::status(if n == 0 { 503 } else { 401 })).await;
    let text = inbox_config(
        &redis_store(&redis),
        &handler.url(),
        "backoff = \"200ms\"\nmax_backoff = \"1s\"\nmax_attempts = 2\nvisibility_timeout = \"10s\"",
    );
    let gate = GateProcess::start(&text);
    let first = Sender::new()
        .deliver(&gate.url("/notify"), &payment("refused"))
        .await
        .unwrap();
    assert_eq!((first.status, &first.body[..]), (200, ACK.as_bytes()));
    let view = until_state(gate.admin, "refused", "dead").await;
    assert_eq!(view["attempts"], 2, "{view}");
    assert_eq!(view["last_answer"]["status"], 401, "{view}");
    assert_eq!(view["last_error"], "handler answered 401", "{view}");
    assert_eq!(handler.calls(), 3, "the live attempt and two redeliveries");

    let headers = handler.headers();
    let live = &headers[0];
    for (attempt, redelivery) in headers[1..].iter().enumerate() {
        assert_eq!(
            redelivery.get("x-forwarded-for"),
            live.get("x-forwarded-for"),
            "redelivery {attempt} names the sender as the live attempt did"
        );
        assert_eq!(
            redelivery
                .get("idemgate-redelivery")
                .and_then(|v| v.to_str().ok()),
            Some((attempt + 1).to_string().as_str())
        );
        for (name, value) in live {
            if name != "content-length" {
                assert_eq!(redelivery.get(name), Some(value), "{name}");
            }
        }
    }
    assert_eq!(
        live.get("x-forwarded-for").and_then(|v| v.to_str().ok()),
        Some("127.0.0.1")
    );
    assert!(live.get("idemgate-redelivery").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_inbox_stops_acknowledging_and_drops_nothing() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let (port, url) = absent_handler();
    let text = inbox_config(
        &redis_store(&redis),
        &url,
        &format!("{PATIENT}\nmax_queued = 3"),
    );
    let gate = GateProcess::start(&text);
    let sender = Sender::new();
    let mut answers = Vec::new();
    for i in 0..5 {
        let answer = sender
            .deliver(&gate.url("/notify"), &payment(&format!("full-{i}")))
            .await
            .unwrap();
        answers.push((answer.status, answer.reason()));
    }
    assert_eq!(
        answers,
        [
            (200, None),
            (200, None),
            (200, None),
            (502, Some("upstream_error".to_owned())),
            (502, Some("upstream_error".to_owned())),
        ],
        "three acknowledged; beyond max_queued the sender gets the handler's failure"
    );
    assert_eq!(listed(gate.admin, "queued").await.len(), 3);
    // The listing's edges: a full last page says it is the last, a
    // repeated parameter and a trailing slash are refused.
    let (status, page) = admin(gate.admin, "GET", "/admin/inbox/pay?state=queued&limit=3").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(3));
    assert!(page["next_cursor"].is_null(), "no next page: {page}");
    let (status, page) = admin(gate.admin, "GET", "/admin/inbox/pay?state=queued&limit=2").await;
    assert_eq!(status, 200, "{page}");
    assert!(page["next_cursor"].is_string(), "a next page: {page}");
    let (status, _) = admin(
        gate.admin,
        "GET",
        "/admin/inbox/pay?state=dead&state=queued",
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = admin(gate.admin, "GET", "/admin/inbox/pay/").await;
    assert_eq!(status, 404);
    let series = "idemgate_inbox_full_total{route=\"pay\"}";
    assert_eq!(metric(gate.admin, series).await, Some(2.0));
    // The refused ones were released: the sender's own retry is a first
    // delivery again, and is queued once there is room.
    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    let ids: Vec<String> = (0..3).map(|i| format!("full-{i}")).collect();
    drained_once(gate.admin, &handler, &ids, Duration::from_secs(30)).await;
    let retried = sender
        .deliver(&gate.url("/notify"), &payment("full-3"))
        .await
        .unwrap();
    assert_eq!(retried.status, 200);
    assert_eq!(handler.calls(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_api_never_discards_an_acknowledged_delivery() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    // Live attempt 503; the redelivery takes 3 s.
    let handler = Upstream::scripted(|n, _| {
        if n == 0 {
            Reply::status(503)
        } else {
            Reply::slow(Duration::from_secs(3))
        }
    })
    .await;
    let text = inbox_config(
        &redis_store(&redis),
        &handler.url(),
        "backoff = \"200ms\"\nmax_backoff = \"1s\"\nvisibility_timeout = \"10s\"",
    );
    let gate = GateProcess::start(&text);
    let sender = Sender::new();
    let first = sender
        .deliver(&gate.url("/notify"), &payment("busy"))
        .await
        .unwrap();
    assert_eq!(first.status, 200);
    until_state(gate.admin, "busy", "delivering").await;
    let purge = "/admin/records/pay/busy?expect_state=inbox";
    let (status, refused) = admin(gate.admin, "DELETE", purge).await;
    assert_eq!(
        status, 409,
        "a delivery being sent is not purged: {refused}"
    );
    let (status, record) = admin(gate.admin, "GET", "/admin/records/pay/busy").await;
    assert_eq!(
        (status, &record["inbox_stage"]),
        (200, &"delivering".into())
    );
    until_state(gate.admin, "busy", "delivered").await;
    let (status, _) = admin(gate.admin, "DELETE", purge).await;
    assert_eq!(status, 204, "a delivered one is");
    assert_eq!(handler.calls(), 2);
    drop(gate);

    // A queued delivery was acknowledged: the record API does not discard
    // it (its sender will not send it again); a drop, on purpose, does.
    let (port, url) = absent_handler();
    let text = inbox_config(&redis_store(&redis), &url, PATIENT);
    let gate = GateProcess::start(&text);
    for id in ["queued-a", "queued-b"] {
        let answer = sender
            .deliver(&gate.url("/notify"), &payment(id))
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
    }
    let purge = "/admin/records/pay/queued-a?expect_state=inbox";
    let (status, refused) = admin(gate.admin, "DELETE", purge).await;
    assert_eq!((status, &refused["reason"]), (409, &"wrong_stage".into()));
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("/admin/inbox/pay/drop"), "{detail}");
    assert_eq!(
        listed(gate.admin, "queued").await.len(),
        2,
        "nothing discarded"
    );
    let (status, _) = admin(
        gate.admin,
        "POST",
        "/admin/inbox/pay/drop?key=queued-a&expect_state=queued",
    )
    .await;
    assert_eq!(status, 200);
    let queued = listed(gate.admin, "queued").await;
    assert_eq!(
        queued.len(),
        1,
        "the purged delivery left the queue: {queued:?}"
    );
    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    drained_once(
        gate.admin,
        &handler,
        &["queued-b".to_owned()],
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_delivery_stays_listed_whatever_another_route_of_its_scope_keeps() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let handler = Upstream::scripted(|_, _| Reply::status(503)).await;
    let shared = "scope = \"shared\"\nfingerprint = [\"json:/id\", \"json:/amount\"]";
    // Route pay keeps records an hour; route cb, in the same scope, 4 s.
    let text = inbox_config(
        &redis_store(&redis),
        &handler.url(),
        "backoff = \"100ms\"\nmax_backoff = \"1s\"\nmax_attempts = 1\nvisibility_timeout = \"10s\"",
    )
    .replace(
        "retention = \"1h\"",
        &format!("retention = \"1h\"\n{shared}"),
    );
    let cb = format!(
        "\n[[route]]\nname = \"cb\"\npath_prefix = \"/cb\"\n[route.signature]\nscheme = \"hmac\"\n\
         secrets = [\"literal:{SECRET}\"]\nsignature = \"header:X-Signature\"\n\
         message = \"{{timestamp}}.{{body}}\"\ntimestamp = \"header:X-Timestamp\"\ntolerance = \"3s\"\n\
         [route.idempotency]\nkey = [\"json:/id\"]\nretention = \"4s\"\n{shared}\n[route.inbox]\n"
    );
    let gate = GateProcess::start(&format!("{text}{cb}"));
    let first = Sender::new()
        .deliver(&gate.url("/notify"), &payment("shared-dead"))
        .await
        .unwrap();
    assert_eq!(first.status, 200);
    until_state(gate.admin, "shared-dead", "dead").await;
    // Two gauge refreshes (every 5 s) after cb's retention would have run out.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let dead = listed(gate.admin, "dead").await;
    assert_eq!(dead.len(), 1, "still listed: {dead:?}");
    let series = "idemgate_inbox_dead{route=\"pay\"}";
    assert_eq!(metric(gate.admin, series).await, Some(1.0));
    let view = delivery(gate.admin, "shared-dead").await;
    assert_eq!(view["state"], "dead", "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_deliveries_count_toward_max_queued() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let handler = Upstream::scripted(|_, _| Reply::status(503)).await;
    let text = inbox_config(
        &redis_store(&redis),
        &handler.url(),
        "backoff = \"100ms\"\nmax_backoff = \"1s\"\nmax_attempts = 1\nvisibility_timeout = \"10s\"\nmax_queued = 1",
    );
    let gate = GateProcess::start(&text);
    let sender = Sender::new();
    let first = sender
        .deliver(&gate.url("/notify"), &payment("held-a"))
        .await
        .unwrap();
    assert_eq!((first.status, &first.body[..]), (200, ACK.as_bytes()));
    until_state(gate.admin, "held-a", "dead").await;
    // The dead delivery is still owed (it never expires), so the inbox is
    // full: the next failure reaches its sender, unacknowledged.
    let second = sender
        .deliver(&gate.url("/notify"), &payment("held-b"))
        .await
        .unwrap();
    assert_eq!(second.status, 503, "{:?}", second.body);
    let series = "idemgate_inbox_full_total{route=\"pay\"}";
    assert_eq!(metric(gate.admin, series).await, Some(1.0));
}
