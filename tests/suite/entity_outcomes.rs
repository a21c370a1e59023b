//! `[route.entity]` under every handler outcome, end to end (a real gate,
//! a real handler, Redis and the embedded store): the entity follows what
//! the handler accepted, an unsettled change holds it rather than being
//! taken as "never made", and a notice for a busy entity is told the
//! truth with a `Retry-After` bounded by the route's lease or hold.

use std::time::Duration;

use crate::entity::{MACHINE, notice};
use crate::support::StoreKind as Kind;
use crate::support::*;

const TOKEN: &str = "admin-token-for-entity-outcomes";

/// A gate with the admin token on a fresh store of `kind` in front of
/// `upstream`; `extra` follows the idempotency table, `upstream_timeout`
/// replaces the default 5 s.
async fn gate_on(
    kind: Kind,
    upstream: &Upstream,
    extra: &str,
    upstream_timeout: &str,
) -> (Gate, Option<RedisServer>, Option<tempfile::TempDir>) {
    let (store, redis, dir) = fresh_store(kind);
    let text = config_text(&store, &upstream.url(), extra).replace(
        "timeout = \"5s\"",
        &format!("timeout = \"{upstream_timeout}\""),
    );
    let text = format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n");
    (Gate::start(&text).await, redis, dir)
}

async fn admin(gate: &Gate, method: &str, path: &str) -> Answer {
    let headers = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    send(
        method,
        &format!("http://{}{path}", gate.admin),
        &headers,
        "",
    )
    .await
}

/// The entity's view from the admin API.
async fn entity(gate: &Gate, order: &str) -> serde_json::Value {
    let answer = admin(gate, "GET", &format!("/admin/entities/pay?id={order}")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    serde_json::from_slice(&answer.body).unwrap()
}

/// The statuses the handler saw, in order.
fn statuses(upstream: &Upstream) -> Vec<String> {
    handler_states(upstream)
}

fn retry_after(answer: &Answer) -> u64 {
    answer
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {answer:?}"))
}

async fn a_stored_refusal_never_advances_the_entity(kind: Kind) {
    // The handler refuses the first success notice (404, which the default
    // cache_status stores and replays) and takes every later one.
    let upstream = Upstream::scripted(|n, _| {
        if n == 0 {
            Reply::status(404)
        } else {
            Reply::ok()
        }
    })
    .await;
    let (gate, _redis, _dir) = gate_on(kind, &upstream, MACHINE, "5s").await;
    let url = gate.url("/notify");
    assert_eq!(
        notify(&url, "s1", "o1", "success").await,
        404
    );
    let copy = deliver(&url, &notice("s1", "o1", "success")).await;
    assert_eq!((copy.status, copy.replayed()), (404, Some("true")));
    // A re-notification of the success reaches the handler...
    let again = deliver(&url, &notice("s2", "o1", "success")).await;
    assert_eq!((again.status, again.replayed()), (200, Some("false")));
    // ...and only once it took it is the next one a repeat.
    let repeat = deliver(&url, &notice("s3", "o1", "success")).await;
    assert_eq!((repeat.status, repeat.replayed()), (200, Some("true")));
    assert_eq!(statuses(&upstream), ["success", "success"]);
    assert_eq!(entity(&gate, "o1").await["state"], "success");
    gate.stop().await;
}

#[tokio::test]
async fn a_stored_refusal_never_advances_the_entity_on_redis() {
    a_stored_refusal_never_advances_the_entity(Kind::Redis).await;
}

#[tokio::test]
async fn a_stored_refusal_never_advances_the_entity_on_the_embedded_store() {
    a_stored_refusal_never_advances_the_entity(Kind::Embedded).await;
}

async fn an_unknown_change_holds_the_entity_until_an_operator_resolves_it(kind: Kind) {
    // The success's call outlives the 200 ms upstream timeout: unknown,
    // held for 2 s.
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let extra = format!("unknown_hold = \"2s\"\n{MACHINE}");
    let (gate, _redis, _dir) = gate_on(kind, &upstream, &extra, "200ms").await;
    let url = gate.url("/notify");
    assert_eq!(
        notify(&url, "s1", "o2", "success").await,
        504
    );
    // Behind an unknown change: outcome_unknown, asked back within the hold.
    let behind = deliver(&url, &notice("f1", "o2", "failed")).await;
    assert_eq!(
        (behind.status, behind.reason().as_deref()),
        (409, Some("outcome_unknown")),
        "{behind:?}"
    );
    assert!((1..=2).contains(&retry_after(&behind)), "{behind:?}");
    // The hold runs out: the change is still unresolved, never taken as
    // "never made" — no later notice, and no copy, is judged against the
    // state the handler may have left.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    for (id, status) in [("f1", "failed"), ("s1", "success"), ("r1", "refunded")] {
        let held = deliver(&url, &notice(id, "o2", status)).await;
        assert_eq!(
            (held.status, held.reason().as_deref()),
            (409, Some("outcome_unknown")),
            "{id}: {held:?}"
        );
        assert!(retry_after(&held) <= 2, "{held:?}");
    }
    assert_eq!(upstream.calls(), 1);
    // The entity shows what holds it; the operator checked the handler
    // (it did not apply the success) and purges that delivery.
    let view = entity(&gate, "o2").await;
    assert!(view["state"].is_null(), "{view}");
    let pending = view["pending"]["delivery"].as_str().unwrap().to_owned();
    let hash = pending.replace('{', "%7B").replace('}', "%7D");
    let purge = admin(&gate, "DELETE", &format!("/admin/records/pay?hash={hash}")).await;
    assert_eq!(purge.status, 204, "{purge:?}");
    // Nothing is left of an entity whose only change never happened.
    let gone = admin(&gate, "GET", "/admin/entities/pay?id=o2").await;
    assert_eq!(
        gone.reason().as_deref(),
        Some("entity_not_found"),
        "{gone:?}"
    );
    // The sender's retry of the success now executes, once.
    let retry = deliver(&url, &notice("s1", "o2", "success")).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(statuses(&upstream), ["success", "success"]);
    assert_eq!(entity(&gate, "o2").await["state"], "success");
    gate.stop().await;
}

#[tokio::test]
async fn an_unknown_change_holds_the_entity_until_an_operator_resolves_it_on_redis() {
    an_unknown_change_holds_the_entity_until_an_operator_resolves_it(Kind::Redis).await;
}

#[tokio::test]
async fn an_unknown_change_holds_the_entity_until_an_operator_resolves_it_on_the_embedded_store() {
    an_unknown_change_holds_the_entity_until_an_operator_resolves_it(Kind::Embedded).await;
}

async fn a_dead_delivery_holds_its_entity_and_its_retry_applies(kind: Kind) {
    // The success's live call and its one redelivery fail (503): dead.
    // Every other call succeeds.
    let upstream = Upstream::scripted(|n, _| {
        if n == 1 || n == 2 {
            Reply::status(503)
        } else {
            Reply::ok()
        }
    })
    .await;
    let extra = format!(
        "{MACHINE}\n[route.inbox]\nack_body = \"success\"\nmax_attempts = 1\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\n"
    );
    let (gate, _redis, _dir) = gate_on(kind, &upstream, &extra, "5s").await;
    let url = gate.url("/notify");
    assert_eq!(
        notify(&url, "s1", "o3", "pending").await,
        200
    );
    let queued = deliver(&url, &notice("s2", "o3", "success")).await;
    assert_eq!((queued.status, &queued.body[..]), (200, &b"success"[..]));
    let dead = eventually(Duration::from_secs(10), || upstream.calls() == 3).await;
    assert!(dead, "redelivered once");
    let view = entity(&gate, "o3").await;
    let pending = view["pending"]["delivery"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !pending.is_empty(),
        "the dead delivery's change is pending: {view}"
    );
    // A refund behind the dead success: acknowledged and held (the route
    // has an inbox), never judged against the state the handler has not
    // reached.
    let refund = deliver(&url, &notice("r1", "o3", "refunded")).await;
    assert_eq!((refund.status, &refund.body[..]), (200, &b"success"[..]));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        upstream.calls(),
        3,
        "the refund waits behind the dead success"
    );
    // The operator retries the dead delivery: delivered, applied, and the
    // held refund follows.
    let hash = pending.replace('{', "%7B").replace('}', "%7D");
    let retry = admin(
        &gate,
        "POST",
        &format!("/admin/inbox/pay/retry?hash={hash}&expect_state=dead"),
    )
    .await;
    assert_eq!(retry.status, 200, "{retry:?}");
    assert!(
        eventually(Duration::from_secs(10), || upstream.calls() == 5).await,
        "retried, then the refund"
    );
    let mut state = serde_json::Value::Null;
    for _ in 0..50 {
        state = entity(&gate, "o3").await["state"].clone();
        if state == "refunded" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "refunded");
    assert_eq!(
        statuses(&upstream),
        ["pending", "success", "success", "success", "refunded"]
    );
    gate.stop().await;
}

#[tokio::test]
async fn a_dead_delivery_holds_its_entity_and_its_retry_applies_on_redis() {
    a_dead_delivery_holds_its_entity_and_its_retry_applies(Kind::Redis).await;
}

#[tokio::test]
async fn a_dead_delivery_holds_its_entity_and_its_retry_applies_on_the_embedded_store() {
    a_dead_delivery_holds_its_entity_and_its_retry_applies(Kind::Embedded).await;
}

fn encoded(hash: &str) -> String {
    hash.replace('{', "%7B").replace('}', "%7D")
}

async fn an_operator_corrects_a_held_entity_with_what_they_saw(kind: Kind) {
    // The success's call times out (unknown, held 300 ms) although the
    // handler applied it; every later call is answered at once.
    let upstream = Upstream::slow_first(Duration::from_millis(600)).await;
    let extra = format!("unknown_hold = \"300ms\"\n{MACHINE}");
    let (gate, _redis, _dir) = gate_on(kind, &upstream, &extra, "200ms").await;
    let url = gate.url("/notify");
    assert_eq!(
        notify(&url, "s1", "o4", "success").await,
        504
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let view = entity(&gate, "o4").await;
    let pending = view["pending"]["delivery"].as_str().unwrap().to_owned();
    // A correction from a stale view is refused, and says what is there.
    let stale = admin(
        &gate,
        "PUT",
        "/admin/entities/pay?id=o4&state=success&expect_state=pending&expect_pending=",
    )
    .await;
    assert_eq!(
        stale.reason().as_deref(),
        Some("entity_changed"),
        "{stale:?}"
    );
    let detail = String::from_utf8_lossy(&stale.body).into_owned();
    assert!(detail.contains(&pending), "{detail}");
    assert!(entity(&gate, "o4").await["pending"].is_object());
    // An undeclared state is a bad request.
    let undeclared = admin(
        &gate,
        "PUT",
        &format!(
            "/admin/entities/pay?id=o4&state=paid&expect_state=&expect_pending={}",
            encoded(&pending)
        ),
    )
    .await;
    assert_eq!(undeclared.reason().as_deref(), Some("bad_request"));
    // The operator checked: the handler did apply the success.
    let set = admin(
        &gate,
        "PUT",
        &format!(
            "/admin/entities/pay?id=o4&state=success&expect_state=&expect_pending={}&operator=ana",
            encoded(&pending)
        ),
    )
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    let view: serde_json::Value = serde_json::from_slice(&set.body).unwrap();
    assert_eq!(
        (&view["state"], &view["pending"]),
        (&serde_json::json!("success"), &serde_json::Value::Null)
    );
    assert_eq!(view["history"][0]["kind"], "set");
    assert_eq!(view["history"][0]["delivery"], "ana");
    // The success is not run again; the refund goes through.
    let copy = deliver(&url, &notice("s2", "o4", "success")).await;
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));
    let refund = deliver(&url, &notice("r1", "o4", "refunded")).await;
    assert_eq!((refund.status, refund.replayed()), (200, Some("false")));
    assert_eq!(statuses(&upstream), ["success", "refunded"]);
    // Cleared, the next notice is judged as a first one.
    let cleared = admin(
        &gate,
        "DELETE",
        "/admin/entities/pay?id=o4&expect_state=refunded&expect_pending=",
    )
    .await;
    assert_eq!(cleared.status, 200, "{cleared:?}");
    let view: serde_json::Value = serde_json::from_slice(&cleared.body).unwrap();
    assert!(view["state"].is_null(), "{view}");
    assert_eq!(view["history"][0]["kind"], "cleared");
    let fresh = deliver(&url, &notice("p1", "o4", "pending")).await;
    assert_eq!((fresh.status, fresh.replayed()), (200, Some("false")));
    gate.stop().await;
}

#[tokio::test]
async fn an_operator_corrects_a_held_entity_with_what_they_saw_on_redis() {
    an_operator_corrects_a_held_entity_with_what_they_saw(Kind::Redis).await;
}

#[tokio::test]
async fn an_operator_corrects_a_held_entity_with_what_they_saw_on_the_embedded_store() {
    an_operator_corrects_a_held_entity_with_what_they_saw(Kind::Embedded).await;
}

#[tokio::test]
async fn purging_a_delivery_its_entity_applied_is_refused() {
    let upstream = Upstream::start().await;
    let (gate, _redis, _dir) = gate_on(Kind::Redis, &upstream, MACHINE, "5s").await;
    let url = gate.url("/notify");
    assert_eq!(
        notify(&url, "s1", "o5", "success").await,
        200
    );
    let view = entity(&gate, "o5").await;
    let applied = view["history"][0]["delivery"].as_str().unwrap().to_owned();
    let purge = admin(
        &gate,
        "DELETE",
        &format!("/admin/records/pay?hash={}", encoded(&applied)),
    )
    .await;
    assert_eq!(
        purge.reason().as_deref(),
        Some("entity_applied"),
        "{purge:?}"
    );
    // The record is still there: its copies are still replayed.
    let copy = deliver(&url, &notice("s1", "o5", "success")).await;
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}
