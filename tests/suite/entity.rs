//! `[route.entity]`: the payment's state machine enforced before the
//! handler, on a real Redis and on the embedded store, with a real
//! upstream that records what it was asked to do. Each notice carries its
//! own id (the key), as gateways send them; the entity is the order.

use std::time::Duration;

use bytes::Bytes;

use crate::support::StoreKind as Kind;
use crate::support::*;

pub(crate) use crate::support::{ENTITY_MACHINE as MACHINE, entity_notice as notice};

/// A gate on a fresh store of `kind` with `extra` after the idempotency
/// table, in front of `upstream`; the returned guards keep the store alive.
async fn gate_on(
    kind: Kind,
    upstream: &Upstream,
    extra: &str,
) -> (Gate, Option<RedisServer>, Option<tempfile::TempDir>) {
    let (store, redis, dir) = fresh_store(kind);
    let text = config_text(&store, &upstream.url(), extra);
    (Gate::start(&text).await, redis, dir)
}

/// The statuses the handler saw, in order.
fn statuses(upstream: &Upstream) -> Vec<String> {
    handler_states(upstream)
}

async fn out_of_order_notices_never_regress(kind: Kind) {
    let upstream = Upstream::start().await;
    let (gate, _redis, _dir) = gate_on(kind, &upstream, MACHINE).await;
    let url = gate.url("/notify");
    let first = deliver(&url, &notice("n1", "o1", "success")).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    // A failure notice after the success: acknowledged, never forwarded.
    let late = deliver(&url, &notice("n2", "o1", "failed")).await;
    assert_eq!(late.status, 200, "{late:?}");
    assert_eq!(late.body, Bytes::from_static(b"success"));
    // A stale "pending" too.
    let stale = deliver(&url, &notice("n3", "o1", "pending")).await;
    assert_eq!((stale.status, &stale.body[..]), (200, &b"success"[..]));
    // A second success under a new notice id: a repeat, acknowledged.
    let again = deliver(&url, &notice("n4", "o1", "success")).await;
    assert_eq!((again.status, &again.body[..]), (200, &b"success"[..]));
    assert_eq!(again.replayed(), Some("true"));
    // A copy of the first notice is still a replay of its own answer.
    let copy = deliver(&url, &notice("n1", "o1", "success")).await;
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));
    assert_eq!(copy.body, first.body);
    // An allowed change goes through; a terminal state is never left.
    assert_eq!(notify(&url, "n5", "o1", "refunded").await, 200);
    let revived = deliver(&url, &notice("n6", "o1", "success")).await;
    assert_eq!(&revived.body[..], b"success");
    assert_eq!(statuses(&upstream), ["success", "refunded"]);
    gate.stop().await;
}

#[tokio::test]
async fn out_of_order_notices_never_regress_on_redis() {
    out_of_order_notices_never_regress(Kind::Redis).await;
}

#[tokio::test]
async fn out_of_order_notices_never_regress_on_the_embedded_store() {
    out_of_order_notices_never_regress(Kind::Embedded).await;
}

async fn a_success_after_a_failure_ships_once(kind: Kind) {
    let upstream = Upstream::start().await;
    let (gate, _redis, _dir) = gate_on(kind, &upstream, MACHINE).await;
    let url = gate.url("/notify");
    for (id, status) in [
        ("a", "pending"),
        ("b", "failed"),
        ("c", "success"),
        ("d", "success"),
    ] {
        assert_eq!(notify(&url, id, "o2", status).await, 200);
    }
    assert_eq!(statuses(&upstream), ["pending", "failed", "success"]);
    gate.stop().await;
}

#[tokio::test]
async fn a_success_after_a_failure_ships_once_on_redis() {
    a_success_after_a_failure_ships_once(Kind::Redis).await;
}

#[tokio::test]
async fn a_success_after_a_failure_ships_once_on_the_embedded_store() {
    a_success_after_a_failure_ships_once(Kind::Embedded).await;
}

async fn a_handler_failure_leaves_the_state(kind: Kind) {
    // The first "success" fails in the handler (released), every later
    // call succeeds.
    let upstream = Upstream::scripted(|n, _| {
        if n == 1 {
            Reply::status(500)
        } else {
            Reply::ok()
        }
    })
    .await;
    let (gate, _redis, _dir) = gate_on(kind, &upstream, MACHINE).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "p", "o3", "pending").await, 200);
    assert_eq!(notify(&url, "s", "o3", "success").await, 500);
    // Still pending: a failure notice is an allowed change, not a regression.
    let failed = deliver(&url, &notice("f", "o3", "failed")).await;
    assert_eq!((failed.status, failed.replayed()), (200, Some("false")));
    // The sender's retry of the success executes once, from "failed".
    assert_eq!(notify(&url, "s", "o3", "success").await, 200);
    // Now it is applied: a later failure notice is a regression.
    let late = deliver(&url, &notice("f2", "o3", "failed")).await;
    assert_eq!((late.status, &late.body[..]), (200, &b"success"[..]));
    assert_eq!(
        statuses(&upstream),
        ["pending", "success", "failed", "success"]
    );
    gate.stop().await;
}

#[tokio::test]
async fn a_handler_failure_leaves_the_state_on_redis() {
    a_handler_failure_leaves_the_state(Kind::Redis).await;
}

#[tokio::test]
async fn a_handler_failure_leaves_the_state_on_the_embedded_store() {
    a_handler_failure_leaves_the_state(Kind::Embedded).await;
}

#[tokio::test]
async fn conflict_refuses_with_409_transition_refused() {
    let upstream = Upstream::start().await;
    let extra = format!("{MACHINE}on_refused = \"conflict\"\n");
    let (gate, _redis, _dir) = gate_on(Kind::Redis, &upstream, &extra).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "x1", "o4", "success").await, 200);
    let refused = deliver(&url, &notice("x2", "o4", "pending")).await;
    assert_eq!(
        (refused.status, refused.reason().as_deref()),
        (409, Some("transition_refused"))
    );
    let detail = String::from_utf8_lossy(&refused.body).into_owned();
    assert!(detail.contains("from success to pending"), "{detail}");
    // Not an initial-state problem: a fresh entity may start anywhere.
    assert_eq!(notify(&url, "x3", "o5", "failed").await, 200);
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test]
async fn an_undeclared_state_is_field_invalid_and_leaves_nothing() {
    let upstream = Upstream::start().await;
    let (gate, redis, _dir) = gate_on(Kind::Redis, &upstream, MACHINE).await;
    let redis = redis.unwrap();
    let url = gate.url("/notify");
    let store = redis.watch_data();
    for status in ["SUCCESS", "success ", "paid", ""] {
        let refused = deliver(&url, &notice("u1", "o6", status)).await;
        assert_eq!(
            (refused.status, refused.reason().as_deref()),
            (400, Some("field_invalid")),
            "{status:?}"
        );
    }
    let no_order = deliver(&url, r#"{"id":"u2","status":"success"}"#).await;
    assert_eq!(no_order.reason().as_deref(), Some("key_missing"));
    assert_eq!(store.commands(), Vec::<String>::new(), "no store access");
    assert_eq!(upstream.calls(), 0);
    gate.stop().await;
}

async fn concurrent_notices_are_serialised(kind: Kind, on_in_flight: &str) {
    // The success takes 600 ms in the handler; the failure notice arrives
    // meanwhile.
    let upstream = Upstream::scripted(|_, body| {
        if body.windows(9).any(|w| w == b"\"success\"") {
            Reply::slow(Duration::from_millis(600))
        } else {
            Reply::ok()
        }
    })
    .await;
    let extra = format!("on_in_flight = \"{on_in_flight}\"\nwait_timeout = \"5s\"\n{MACHINE}");
    let (gate, _redis, _dir) = gate_on(kind, &upstream, &extra).await;
    let url = gate.url("/notify");
    let success = tokio::spawn({
        let url = url.clone();
        async move { deliver(&url, &notice("c1", "o7", "success")).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let failure = deliver(&url, &notice("c2", "o7", "failed")).await;
    assert_eq!(success.await.unwrap().status, 200);
    if on_in_flight == "conflict" {
        assert_eq!(
            (failure.status, failure.reason().as_deref()),
            (409, Some("in_flight"))
        );
        assert!(failure.header("retry-after").is_some());
    } else {
        // Waited, then judged against the state the success left.
        assert_eq!((failure.status, &failure.body[..]), (200, &b"success"[..]));
    }
    assert_eq!(statuses(&upstream), ["success"], "never both forwarded");
    gate.stop().await;
}

#[tokio::test]
async fn a_notice_waits_for_its_entitys_change_on_redis() {
    concurrent_notices_are_serialised(Kind::Redis, "wait").await;
}

#[tokio::test]
async fn a_notice_waits_for_its_entitys_change_on_the_embedded_store() {
    concurrent_notices_are_serialised(Kind::Embedded, "wait").await;
}

#[tokio::test]
async fn a_notice_during_its_entitys_change_gets_409_with_conflict() {
    concurrent_notices_are_serialised(Kind::Redis, "conflict").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discrepancies_and_repeats_are_counted_per_route_and_states() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), MACHINE));
    let url = gate.url("/notify");
    deliver(&url, &notice("m1", "o8", "success")).await;
    deliver(&url, &notice("m2", "o8", "failed")).await;
    deliver(&url, &notice("m3", "o8", "failed")).await;
    deliver(&url, &notice("m4", "o8", "success")).await;
    let series = |from: &str, to: &str| {
        format!("idemgate_entity_discrepancies_total{{route=\"pay\",from=\"{from}\",to=\"{to}\"}}")
    };
    assert_eq!(
        metric(gate.admin, &series("success", "failed")).await,
        Some(2.0)
    );
    let repeats = "idemgate_entity_repeats_total{route=\"pay\",state=\"success\"}";
    assert_eq!(metric(gate.admin, repeats).await, Some(1.0));
    let rejected = "idemgate_rejections_total{route=\"pay\",reason=\"transition_refused\"}";
    assert_eq!(metric(gate.admin, rejected).await, Some(2.0));
    assert_eq!(upstream.calls(), 1);
}

async fn an_inbox_redelivery_applies_the_change_when_delivered(kind: Kind) {
    // The success's first call fails (503): acknowledged and queued; the
    // redelivery succeeds. The entity is busy until then, and in "success"
    // after.
    let upstream = Upstream::scripted(|n, _| {
        if n == 0 {
            Reply::status(503)
        } else {
            Reply::ok()
        }
    })
    .await;
    let extra = format!(
        "{MACHINE}\n[route.inbox]\nack_body = \"success\"\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\nvisibility_timeout = \"6s\"\n"
    );
    let (gate, _redis, _dir) = gate_on(kind, &upstream, &extra).await;
    let url = gate.url("/notify");
    let queued = deliver(&url, &notice("q1", "o9", "success")).await;
    assert_eq!((queued.status, &queued.body[..]), (200, &b"success"[..]));
    assert!(
        eventually(Duration::from_secs(10), || upstream.calls() == 2).await,
        "redelivered"
    );
    // Give the redelivery's settle a moment; a waiting notice would also
    // be judged after it.
    let late = deliver(&url, &notice("q2", "o9", "failed")).await;
    assert_eq!((late.status, &late.body[..]), (200, &b"success"[..]));
    assert_eq!(statuses(&upstream), ["success", "success"], "{late:?}");
    gate.stop().await;
}

#[tokio::test]
async fn an_inbox_redelivery_applies_the_change_when_delivered_on_redis() {
    an_inbox_redelivery_applies_the_change_when_delivered(Kind::Redis).await;
}

#[tokio::test]
async fn an_inbox_redelivery_applies_the_change_when_delivered_on_the_embedded_store() {
    an_inbox_redelivery_applies_the_change_when_delivered(Kind::Embedded).await;
}
