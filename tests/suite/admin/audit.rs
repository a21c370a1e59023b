//! The audit trail (`GET /admin/audit`): every action an admin token asks
//! for is kept in the store with its token, target, the state it found
//! and the state it left, listed newest first, counted, kept across a
//! restart, and forgotten after `[admin] audit_retention`.

use std::time::Duration;

use std::net::SocketAddr;

use super::{TOKEN, with_admin};
use crate::support::*;

const READER: &str = "grafana-token-0001";
const ONCALL: &str = "oncall-token-00001";

/// The test route on `store`, with the main token, a read token `grafana`
/// and an act token `oncall`; `admin_extra` goes into `[admin]`.
fn with_tokens(store: &str, upstream: &Upstream, admin_extra: &str) -> String {
    with_admin(&config_text(store, &upstream.url(), ""))
        .replace("[admin]\n", &format!("[admin]\n{admin_extra}"))
        + &format!(
            "[[admin.tokens]]\nname = \"grafana\"\ntoken = \"literal:{READER}\"\n\
         [[admin.tokens]]\nname = \"oncall\"\ntoken = \"literal:{ONCALL}\"\nscope = \"act\"\n"
        )
}

/// Every entry of the trail, newest first, following `next_cursor` at
/// `limit` per page (bounded: 50 pages).
async fn whole_trail(gate: SocketAddr, limit: usize) -> Vec<serde_json::Value> {
    let mut entries = Vec::new();
    let mut path = format!("/admin/audit?limit={limit}");
    for _ in 0..50 {
        let page = admin_call("GET", gate, &path, READER).await;
        assert_eq!(page.status, 200, "{page:?}");
        let page = page.json();
        let shown = page["items"].as_array().unwrap();
        assert!(shown.len() <= limit, "{page}");
        entries.extend(shown.iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/admin/audit?limit={limit}&cursor={cursor}"),
            None => return entries,
        }
    }
    panic!("the trail did not end within 50 pages");
}

/// The fields a test compares of one entry.
fn summary(entry: &serde_json::Value) -> (String, String, String, String, String, String) {
    let text = |name: &str| entry[name].as_str().unwrap_or("-").to_owned();
    (
        text("token"),
        text("action"),
        text("before"),
        text("after"),
        text("outcome"),
        text("target"),
    )
}

/// The same history on `store`: a refused read-token purge, a purge whose
/// state changed, a purge done, and an entity correction on a route
/// without entities; then the trail, its paging, its counter, and the
/// trail again after a restart.
async fn every_action_is_kept(store: &str) {
    let upstream = Upstream::start().await;
    let text = with_tokens(store, &upstream, "");
    // The real binary: the counter is read from its /metrics.
    let mut gate = GateProcess::start(&text);
    assert_eq!(
        deliver(&gate.url("/notify"), &payment("p-au")).await.status,
        200
    );
    let hash = admin_call("GET", gate.admin, "/admin/records/pay?key=p-au", READER)
        .await
        .json()["key_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let empty = admin_call("GET", gate.admin, "/admin/audit", READER).await;
    assert_eq!(empty.status, 200, "{empty:?}");
    assert_eq!(empty.json()["items"], serde_json::json!([]));
    assert_eq!(empty.json()["next_cursor"], serde_json::Value::Null);

    let purge = |expect: &'static str| format!("/admin/records/pay?key=p-au&expect_state={expect}");
    let steps = [
        (READER, "DELETE", purge("completed"), 403),
        (ONCALL, "DELETE", purge("unknown"), 409),
        (ONCALL, "DELETE", purge("completed"), 204),
        (
            TOKEN,
            "PUT",
            "/admin/entities/pay?id=o-1&state=paid&expect_state=&expect_pending=".to_owned(),
            404,
        ),
    ];
    for (token, method, path, status) in &steps {
        let answer = admin_call(method, gate.admin, path, token).await;
        assert_eq!(answer.status, *status, "{method} {path}: {answer:?}");
    }
    // Looking is not acting: none of these is in the trail.
    admin_call("GET", gate.admin, "/admin/records/pay?key=p-au", ONCALL).await;

    let trail = whole_trail(gate.admin, 100).await;
    let entity = trail[0]["target"].as_str().unwrap_or_default().to_owned();
    assert!(
        entity.len() == 32 && entity.bytes().all(|b| b.is_ascii_hexdigit()),
        "the entity correction names its entity's hash: {trail:#?}"
    );
    assert_eq!(trail[0]["expected"], "none", "{trail:#?}");
    let own = |a: &str, b: &str, c: &str, d: &str, e: &str, f: &str| {
        (a.into(), b.into(), c.into(), d.into(), e.into(), f.into())
    };
    let expected = vec![
        own(
            "admin",
            "entity_set",
            "-",
            "-",
            "entity_not_configured",
            &entity,
        ),
        own("oncall", "purge", "completed", "absent", "done", &hash),
        own(
            "oncall",
            "purge",
            "completed",
            "completed",
            "record_changed",
            &hash,
        ),
        own("grafana", "purge", "-", "-", "read_only_token", "-"),
    ];
    let got: Vec<_> = trail.iter().map(summary).collect();
    assert_eq!(got, expected, "{trail:#?}");
    assert!(trail.iter().all(|e| e["route"] == "pay"), "{trail:#?}");
    assert_eq!(trail[2]["expected"], "unknown", "{trail:#?}");
    assert_eq!(trail[1]["status"], 204, "{trail:#?}");
    let times: Vec<u64> = trail.iter().map(|e| e["at_ms"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    let ids: Vec<&str> = trail.iter().map(|e| e["id"].as_str().unwrap()).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{ids:?}");

    assert_eq!(
        whole_trail(gate.admin, 1).await,
        trail,
        "one entry per page"
    );
    let scraped = scrape(gate.admin).await;
    for (action, outcome, count) in [
        ("purge", "done", 1.0),
        ("purge", "record_changed", 1.0),
        ("purge", "read_only_token", 1.0),
        ("entity_set", "entity_not_configured", 1.0),
    ] {
        assert_eq!(
            scraped.value(
                "idemgate_admin_actions_total",
                &[("action", action), ("outcome", outcome)]
            ),
            Some(count),
            "{action} {outcome}"
        );
    }
    // A cursor before every entry (or before the retention) ends the walk.
    for cursor in ["a1.0-0", "a1.1-0"] {
        let before_all = admin_call(
            "GET",
            gate.admin,
            &format!("/admin/audit?cursor={cursor}"),
            READER,
        )
        .await;
        assert_eq!(before_all.status, 200, "{before_all:?}");
        assert_eq!(before_all.json()["items"], serde_json::json!([]));
        assert_eq!(before_all.json()["next_cursor"], serde_json::Value::Null);
    }
    let forged = admin_call("GET", gate.admin, "/admin/audit?cursor=i1.nonsense", READER).await;
    assert_eq!(
        forged.reason().as_deref(),
        Some("bad_request"),
        "{forged:?}"
    );
    assert_eq!(
        admin_call("DELETE", gate.admin, "/admin/audit", TOKEN)
            .await
            .status,
        405
    );
    assert_eq!(
        send(
            "GET",
            &format!("http://{}/admin/audit", gate.admin),
            &[],
            ""
        )
        .await
        .status,
        401
    );
    assert!(gate.terminate().success());

    // Kept in the store: another process lists the same trail.
    let again = Gate::start(&text).await;
    assert_eq!(whole_trail(again.admin, 100).await, trail);
    again.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_is_kept_in_the_embedded_store() {
    let (_dir, store) = temp_embedded_store();
    every_action_is_kept(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_is_kept_in_redis() {
    let redis = RedisServer::start();
    every_action_is_kept(&redis_store(&redis)).await;
}

/// An entry older than `audit_retention` is no longer listed, on both
/// stores; a newer one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_older_than_the_retention_are_forgotten() {
    let redis = RedisServer::start();
    let (_dir, embedded) = temp_embedded_store();
    for store in [redis_store(&redis), embedded] {
        let upstream = Upstream::start().await;
        let gate = Gate::start(&with_tokens(
            &store,
            &upstream,
            "audit_retention = \"2s\"\n",
        ))
        .await;
        let action = "/admin/records/pay?key=gone&expect_state=completed";
        assert_eq!(
            admin_call("DELETE", gate.admin, action, ONCALL)
                .await
                .status,
            404
        );
        assert_eq!(whole_trail(gate.admin, 10).await.len(), 1);
        tokio::time::sleep(Duration::from_millis(2_300)).await;
        assert_eq!(
            whole_trail(gate.admin, 10).await,
            Vec::<serde_json::Value>::new()
        );
        assert_eq!(
            admin_call("DELETE", gate.admin, action, ONCALL)
                .await
                .status,
            404
        );
        let trail = whole_trail(gate.admin, 10).await;
        assert_eq!(trail.len(), 1, "{trail:#?}");
        assert_eq!(trail[0]["outcome"], "record_not_found");
        gate.stop().await;
    }
}

/// What the request chose is kept short (a read token's refusals are
/// recorded too), and an action the store could not record still stands,
/// counted in `idemgate_admin_audit_failures_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_route_is_cut_and_a_store_failure_is_counted() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&with_tokens(&redis_store(&redis), &upstream, ""));
    let long = "r".repeat(5_000);
    let refused = admin_call(
        "DELETE",
        gate.admin,
        &format!("/admin/records/{long}?key=k&expect_state=unknown"),
        READER,
    )
    .await;
    assert_eq!(refused.reason().as_deref(), Some("read_only_token"));
    let trail = whole_trail(gate.admin, 10).await;
    let route = trail[0]["route"].as_str().unwrap();
    assert_eq!(route.chars().count(), 65, "{route}");
    assert!(route.ends_with('…'), "{route}");

    redis.stop();
    let failed = admin_call(
        "DELETE",
        gate.admin,
        "/admin/records/pay?key=k&expect_state=unknown",
        ONCALL,
    )
    .await;
    assert_eq!(
        failed.reason().as_deref(),
        Some("store_unavailable"),
        "{failed:?}"
    );
    let scraped = scrape(gate.admin).await;
    assert_eq!(
        scraped.value("idemgate_admin_audit_failures_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        scraped.value(
            "idemgate_admin_actions_total",
            &[("action", "purge"), ("outcome", "store_unavailable")]
        ),
        Some(1.0)
    );
}
