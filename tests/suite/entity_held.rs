//! Notices held in order behind a busy entity (`store::entity::held`), end
//! to end on a route with an inbox: acknowledged at once, delivered in
//! arrival order once the change before them settles, each judged against
//! the state the one before it left; bounded by `max_held_per_entity`.

use std::time::Duration;

use crate::entity::{MACHINE, notice};
use crate::support::StoreKind as Kind;
use crate::support::*;

const TOKEN: &str = "admin-token-for-held-notices";

/// The success notice takes 800 ms in the handler; everything else is
/// answered at once.
async fn slow_success() -> Upstream {
    Upstream::scripted(|_, body| {
        if body.windows(9).any(|w| w == b"\"success\"") {
            Reply::slow(Duration::from_millis(800))
        } else {
            Reply::ok()
        }
    })
    .await
}

async fn gate_on(
    kind: Kind,
    upstream: &Upstream,
    entity_extra: &str,
) -> (Gate, Option<RedisServer>, Option<tempfile::TempDir>) {
    let (store, redis, dir) = fresh_store(kind);
    let extra = format!(
        "{MACHINE}{entity_extra}\n[route.inbox]\nack_body = \"success\"\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\n"
    );
    let text = config_text(&store, &upstream.url(), &extra);
    let text = format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n");
    (Gate::start(&text).await, redis, dir)
}

async fn admin_json(gate: &Gate, path: &str) -> serde_json::Value {
    let headers = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let answer = send("GET", &format!("http://{}{path}", gate.admin), &headers, "").await;
    assert_eq!(answer.status, 200, "{path}: {answer:?}");
    serde_json::from_slice(&answer.body).unwrap()
}

/// The statuses the handler saw, in order.
fn statuses(upstream: &Upstream) -> Vec<String> {
    handler_states(upstream)
}

async fn held_notices_go_in_order(kind: Kind) {
    let upstream = slow_success().await;
    let (gate, _redis, _dir) = gate_on(kind, &upstream, "").await;
    let url = gate.url("/notify");
    let success = tokio::spawn({
        let url = url.clone();
        async move { deliver(&url, &notice("s1", "o1", "success")).await }
    });
    assert!(eventually(Duration::from_secs(5), || upstream.calls() == 1).await);
    // While the success is with the handler: a refund, a stale failure
    // and a second refund notice arrive. Each is acknowledged at once.
    for (id, status) in [("r1", "refunded"), ("f1", "failed"), ("r2", "refunded")] {
        let started = std::time::Instant::now();
        let held = deliver(&url, &notice(id, "o1", status)).await;
        assert_eq!(
            (held.status, &held.body[..]),
            (200, &b"success"[..]),
            "{id}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(700),
            "{id}: not waited for"
        );
        // A copy of a held notice gets the same acknowledgement.
        let copy = deliver(&url, &notice(id, "o1", status)).await;
        assert_eq!(
            (copy.status, &copy.body[..]),
            (200, &b"success"[..]),
            "{id} copy"
        );
    }
    // The operator's listing shows the entity, what holds it and what waits.
    let listing = admin_json(&gate, "/admin/entities/pay?state=held").await;
    let items = listing["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listing}");
    assert_eq!(items[0]["pending"]["to"], "success", "{listing}");
    let waiting: Vec<&str> = items[0]["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["to"].as_str().unwrap())
        .collect();
    assert_eq!(waiting, ["refunded", "failed", "refunded"], "{listing}");
    assert_eq!(success.await.unwrap().status, 200);
    // The refund goes next; the failure, then judged against "refunded"
    // (terminal), and the second refund (a repeat) never reach the handler.
    assert!(
        eventually(Duration::from_secs(10), || upstream.calls() == 2).await,
        "the held refund was delivered"
    );
    let mut view = serde_json::Value::Null;
    for _ in 0..100 {
        view = admin_json(&gate, "/admin/entities/pay?id=o1").await;
        let counts = &view["counts"];
        if counts["refused"] == 1 && counts["repeats"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(view["state"], "refunded", "{view}");
    assert_eq!(
        view["counts"],
        serde_json::json!({"applied": 2, "refused": 1, "repeats": 1}),
        "{view}"
    );
    assert_eq!(statuses(&upstream), ["success", "refunded"]);
    // The two the entity decided on are resolved, saying why; nothing is
    // left queued.
    let history = view["history"].as_array().unwrap();
    for kind in ["refused", "repeat"] {
        let line = history.iter().find(|t| t["kind"] == kind).unwrap();
        let hash = line["delivery"].as_str().unwrap();
        let hash = hash.replace('{', "%7B").replace('}', "%7D");
        let path = format!("/admin/inbox/pay/delivery?hash={hash}");
        let mut delivery = admin_json(&gate, &path).await;
        for _ in 0..50 {
            if delivery["state"] == "dropped" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            delivery = admin_json(&gate, &path).await;
        }
        assert_eq!(delivery["state"], "dropped", "{delivery}");
        let error = delivery["last_error"].as_str().unwrap_or_default();
        assert!(error.starts_with("not sent: its entity"), "{delivery}");
    }
    // The worker resolves a decided notice right after its entity decided
    // (a second write): give it a moment to leave the queue.
    let mut queued = serde_json::Value::Null;
    for _ in 0..50 {
        queued = admin_json(&gate, "/admin/inbox/pay?state=queued").await;
        if queued["items"] == serde_json::json!([]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(queued["items"], serde_json::json!([]), "{queued}");
    let listing = admin_json(&gate, "/admin/entities/pay?state=held").await;
    assert_eq!(
        listing["items"],
        serde_json::json!([]),
        "nothing holds it now: {listing}"
    );
    gate.stop().await;
}

#[tokio::test]
async fn held_notices_go_in_order_on_redis() {
    held_notices_go_in_order(Kind::Redis).await;
}

#[tokio::test]
async fn held_notices_go_in_order_on_the_embedded_store() {
    held_notices_go_in_order(Kind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_held_per_entity_bounds_the_queue_and_refuses_truthfully() {
    let upstream = slow_success().await;
    let redis = RedisServer::start();
    let extra = format!(
        "{MACHINE}max_held_per_entity = 1\n\n[route.inbox]\nack_body = \"success\"\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\n"
    );
    // The real binary: its /metrics are its own.
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), &extra));
    let url = gate.url("/notify");
    let success = tokio::spawn({
        let url = url.clone();
        async move { deliver(&url, &notice("s1", "o2", "success")).await }
    });
    assert!(eventually(Duration::from_secs(5), || upstream.calls() == 1).await);
    let held = deliver(&url, &notice("r1", "o2", "refunded")).await;
    assert_eq!((held.status, &held.body[..]), (200, &b"success"[..]));
    // The queue is full: not acknowledged, asked back within the lease.
    let refused = deliver(&url, &notice("f1", "o2", "failed")).await;
    assert_eq!(
        (refused.status, refused.reason().as_deref()),
        (409, Some("in_flight")),
        "{refused:?}"
    );
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after <= 30, "{refused:?}");
    let series =
        |result: &str| format!("idemgate_entity_held_total{{route=\"pay\",result=\"{result}\"}}");
    assert_eq!(metric(gate.admin, &series("held")).await, Some(1.0));
    assert_eq!(metric(gate.admin, &series("full")).await, Some(1.0));
    assert_eq!(success.await.unwrap().status, 200);
    assert!(eventually(Duration::from_secs(10), || upstream.calls() == 2).await);
    assert_eq!(statuses(&upstream), ["success", "refunded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_notice_refused_in_its_turn_is_counted_as_a_discrepancy() {
    let upstream = slow_success().await;
    let redis = RedisServer::start();
    let extra = format!(
        "{MACHINE}\n[route.inbox]\nack_body = \"success\"\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\n"
    );
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), &extra));
    let url = gate.url("/notify");
    let success = tokio::spawn({
        let url = url.clone();
        async move { deliver(&url, &notice("s1", "o3", "success")).await }
    });
    assert!(eventually(Duration::from_secs(5), || upstream.calls() == 1).await);
    // A stale failure arrives while the success is with the handler: held,
    // then judged against "success" in its turn and refused.
    let held = deliver(&url, &notice("f1", "o3", "failed")).await;
    assert_eq!((held.status, &held.body[..]), (200, &b"success"[..]));
    assert_eq!(success.await.unwrap().status, 200);
    let series =
        "idemgate_entity_discrepancies_total{route=\"pay\",from=\"success\",to=\"failed\"}";
    let mut counted = None;
    for _ in 0..50 {
        counted = metric(gate.admin, series).await;
        if counted == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(counted, Some(1.0), "counted by the worker that decided it");
    assert_eq!(statuses(&upstream), ["success"]);
}
