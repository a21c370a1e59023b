//! One scope, two routes (`[route.idempotency] scope`, docs/contract.md §2;
//! the "one idempotent Apply" of docs/configuration.md "Configuration walk-through"): a
//! payment callback (JSON, the gateway's secret) and a reconciliation
//! poller's result (form, its own secret) for the same trade claim one
//! record, so whichever arrives first executes and the other is replayed; a
//! different amount is a real discrepancy and stays 422. Real Redis, real
//! upstream.

use std::time::Duration;

use crate::support::*;

const POLLER_SECRET: &str = "poller-secret-0123456789";
const ADMIN_TOKEN: &str = "scope-admin-token";

/// One `[[route]]` in scope "payments", signed by `secret` over
/// `{timestamp}.{body}`, keyed and fingerprinted by the selectors given,
/// with `extra` lines in its `[route.idempotency]`.
fn payments_route(
    (name, prefix): (&str, &str),
    secret: &str,
    key: &str,
    parts: [&str; 2],
    extra: &str,
) -> String {
    let signature = [
        "scheme = \"hmac\"",
        &format!("secrets = [\"literal:{secret}\"]"),
        "signature = \"header:X-Signature\"",
        "message = \"{timestamp}.{body}\"",
        "timestamp = \"header:X-Timestamp\"",
    ]
    .join("\n");
    format!(
        "[[route]]\nname = {name:?}\npath_prefix = {prefix:?}\n[route.signature]\n{signature}\n\
         [route.idempotency]\nscope = \"payments\"\nkey = [{key:?}]\nfingerprint = {parts:?}\n{extra}\n"
    )
}

/// The callback route and the reconciliation route, in scope "payments".
fn scoped_config(redis: &RedisServer, upstream: &Upstream) -> String {
    scoped_config_with(redis, upstream, ["", ""])
}

/// [`scoped_config`] with `extra` idempotency lines for the callback and
/// the poller route.
fn scoped_config_with(redis: &RedisServer, upstream: &Upstream, extra: [&str; 2]) -> String {
    let callback = payments_route(
        ("callback", "/notify"),
        SECRET,
        "json:/trade_no",
        ["json:/trade_no", "json:/total_amount"],
        extra[0],
    );
    let poller = payments_route(
        ("poller", "/internal/query-result"),
        POLLER_SECRET,
        "form:out_trade_no",
        ["form:out_trade_no", "form:total_fee"],
        extra[1],
    );
    let head = base_sections(&redis_store(redis), &upstream.url());
    format!("{head}\n{callback}\n{poller}\n[admin]\ntoken = \"literal:{ADMIN_TOKEN}\"\n")
}

async fn callback(gate: &Gate, trade: &str, amount: &str) -> Answer {
    let body = format!(r#"{{"trade_no":"{trade}","total_amount":"{amount}"}}"#);
    let headers = signed_with(SECRET, now_secs(), &body);
    send("POST", &gate.url("/notify"), &headers, body).await
}

async fn poller(gate: &Gate, trade: &str, amount: &str) -> Answer {
    let body = format!("out_trade_no={trade}&total_fee={amount}&trade_status=TRADE_SUCCESS");
    let headers = as_form(signed_with(POLLER_SECRET, now_secs(), &body));
    send("POST", &gate.url("/internal/query-result"), &headers, body).await
}

/// The trade an upstream call was for, whichever route forwarded it.
fn trade_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let start = text
        .find("t-")
        .unwrap_or_else(|| panic!("no trade in {text}"));
    text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_and_reconciliation_apply_each_trade_once() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(20))).await;
    let gate = std::sync::Arc::new(Gate::start(&scoped_config(&redis, &upstream)).await);
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let gate = std::sync::Arc::clone(&gate);
            tokio::spawn(async move {
                let trade = format!("t-{i}");
                // Both orders: even trades start with the callback.
                let (first, second) = if i % 2 == 0 {
                    tokio::join!(
                        callback(&gate, &trade, "10.00"),
                        poller(&gate, &trade, "10.00")
                    )
                } else {
                    let (second, first) = tokio::join!(
                        poller(&gate, &trade, "10.00"),
                        callback(&gate, &trade, "10.00")
                    );
                    (first, second)
                };
                (first.status, second.status)
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), (200, 200));
    }
    let mut executions = std::collections::BTreeMap::<String, usize>::new();
    for body in upstream.bodies() {
        *executions.entry(trade_of(&body)).or_default() += 1;
    }
    assert_eq!(executions.len(), 100, "every trade executed");
    assert!(
        executions.values().all(|n| *n == 1),
        "each trade once: {executions:?}"
    );
    assert_eq!(
        redis.keys("idemgate:payments:*").len(),
        100,
        "one record per trade"
    );
    assert!(redis.keys("idemgate:callback:*").is_empty());

    // The same trade reported with another amount is a discrepancy.
    assert_eq!(callback(&gate, "t-x", "10.00").await.status, 200);
    let mismatch = poller(&gate, "t-x", "9.00").await;
    assert_eq!(
        (mismatch.status, mismatch.reason().as_deref()),
        (422, Some("fingerprint_mismatch"))
    );
    let replay = poller(&gate, "t-x", "10.00").await;
    assert_eq!((replay.status, replay.replayed()), (200, Some("true")));
    assert_eq!(upstream.calls(), 101);
    // The admin API finds the record through either route of the scope.
    for route in ["callback", "poller"] {
        let path = format!("/admin/records/{route}/t-x");
        let record = admin_call("GET", gate.admin, &path, ADMIN_TOKEN).await;
        let text = String::from_utf8_lossy(&record.body).into_owned();
        assert_eq!(record.status, 200, "{route}: {text}");
        assert!(text.contains("\"completed\""), "{route}: {text}");
    }
    if let Ok(gate) = std::sync::Arc::try_unwrap(gate) {
        gate.stop().await;
    }
}

/// Two routes of one scope with different holds: a live claim made through
/// the callback route (lease 1 s, hold 1 s: a TTL of 2 s, renewed while
/// the handler works) is judged by the hold it was written with when read
/// through the poller route (hold 1 h). Judged by the poller's hold, its
/// remaining TTL is always under an hour: a copy got 409 `outcome_unknown`
/// and the record API offered it as `unknown_owner_lost`, to purge while
/// the first delivery still ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_judged_by_the_hold_it_was_written_with() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(2500))).await;
    let text = scoped_config_with(
        &redis,
        &upstream,
        [
            "lease = \"1s\"\nunknown_hold = \"1s\"",
            "unknown_hold = \"1h\"\non_in_flight = \"conflict\"",
        ],
    );
    let gate = std::sync::Arc::new(Gate::start(&text).await);
    let first = {
        let gate = std::sync::Arc::clone(&gate);
        tokio::spawn(async move { callback(&gate, "t-held", "10.00").await })
    };
    wait_until(Duration::from_secs(5), "the handler called", || {
        upstream.calls() == 1
    });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let copy = poller(&gate, "t-held", "10.00").await;
    assert_eq!(
        (copy.status, copy.reason().as_deref()),
        (409, Some("in_flight")),
        "a live claim through a sibling route"
    );
    let record = send(
        "GET",
        &format!("http://{}/admin/records/poller/t-held", gate.admin),
        &[("authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}"))],
        "",
    )
    .await;
    let text = String::from_utf8_lossy(&record.body).into_owned();
    assert!(text.contains("\"state\":\"in_flight\""), "{text}");
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(upstream.calls(), 1);
    if let Ok(gate) = std::sync::Arc::try_unwrap(gate) {
        gate.stop().await;
    }
}
