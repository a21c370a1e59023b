//! `[[route.guard]]`: a verified callback whose business field is outside
//! the whitelist is refused with 400 `field_invalid` before any store
//! access, so its corrected retry is a first delivery. Real Redis, real
//! upstream.

use crate::support::*;

/// `[[route.guard]]` on `json:/status`, appended after the idempotency rules.
const STATUS_GUARD: &str =
    "[[route.guard]]\nfield = \"json:/status\"\none_of = [\"PAID\", \"REFUNDED\"]";

fn callback(id: &str, status: &str) -> String {
    format!(r#"{{"id":"{id}","amount":"10.00","status":{status}}}"#)
}

#[tokio::test]
async fn only_whitelisted_values_reach_the_store_and_the_handler() {
    let (redis, upstream, gate) = redis_gate(STATUS_GUARD).await;
    let url = gate.url("/notify");
    assert_eq!(deliver(&url, &callback("g1", "\"PAID\"")).await.status, 200);
    assert_eq!(upstream.calls(), 1);

    let store = redis.watch_data();
    for status in [
        "\"paid\"",
        "\"Paid\"",
        "\"PAID \"",
        "\" PAID\"",
        "\"WAIT_BUYER_PAY\"",
        "\"\"",
        "null",
        "1",
        "[\"PAID\"]",
    ] {
        let refused = deliver(&url, &callback("g2", status)).await;
        assert_eq!(
            (refused.status, refused.reason().as_deref()),
            (400, Some("field_invalid")),
            "status {status}: {refused:?}"
        );
        assert_eq!(refused.replayed(), None);
    }
    let missing = deliver(&url, r#"{"id":"g2","amount":"10.00"}"#).await;
    assert_eq!(missing.reason().as_deref(), Some("field_invalid"));
    // An unsigned copy is still refused for its signature first.
    let unsigned = send("POST", &url, &[], callback("g2", "\"nope\"")).await;
    assert_eq!(unsigned.status, 401);
    assert_eq!(store.commands(), Vec::<String>::new(), "no store access");
    assert_eq!(upstream.calls(), 1, "the handler saw none of them");

    // Nothing was kept for g2: the corrected callback is a first delivery.
    let corrected = deliver(&url, &callback("g2", "\"REFUNDED\"")).await;
    assert_eq!(
        (corrected.status, corrected.replayed()),
        (200, Some("false"))
    );
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test]
async fn in_shadow_mode_a_failed_guard_is_forwarded() {
    let (_redis, upstream, gate) = redis_gate(&format!("mode = \"shadow\"\n{STATUS_GUARD}")).await;
    let answer = deliver(&gate.url("/notify"), &callback("g3", "\"pending\"")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_shadow_mode_a_failed_guard_is_counted_as_a_refusal() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let extra = format!("mode = \"shadow\"\n{STATUS_GUARD}");
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), &extra));
    let answer = deliver(&gate.url("/notify"), &callback("g4", "\"pending\"")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let refused = "idemgate_rejections_total{route=\"pay\",reason=\"field_invalid\"}";
    assert_eq!(metric(gate.admin, refused).await, Some(1.0));
    assert_eq!(upstream.calls(), 1, "forwarded all the same");
}
