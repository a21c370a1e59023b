//! `idemgate admin inbox …` on a dead delivery: list, show, retry, drop.

use std::net::SocketAddr;
use std::time::Duration;

use super::{cli_at, with_admin};
use crate::support::*;

/// The test route with an inbox whose handler always fails: one
/// redelivery 100 ms after the live attempt, then the delivery is dead.
fn dying_inbox(redis: &RedisServer, handler: &Upstream) -> String {
    with_admin(&format!(
        "{}\n[route.inbox]\nack_body = \"success\"\nbackoff = \"100ms\"\nmax_backoff = \"1s\"\n\
         max_attempts = 1\nvisibility_timeout = \"10s\"\n",
        config_text(&redis_store(redis), &handler.url(), "")
    ))
}

/// Polls `inbox show` until the delivery `id` is in `state` (bounded: 20 s).
async fn until_state(admin: SocketAddr, id: &str, state: &str) -> serde_json::Value {
    poll(
        &format!("delivery {id} to be {state}"),
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let view = cli_at(admin, &["--json", "inbox", "show", "pay", "--key", id])
                .await
                .ok()
                .json();
            (view["state"] == state).then_some(view)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_list_show_retry_and_drop_a_dead_delivery() {
    let redis = RedisServer::start();
    let handler = Upstream::scripted(|_, _| Reply::status(503)).await;
    let gate = Gate::start(&dying_inbox(&redis, &handler)).await;
    let first = deliver(&gate.url("/notify"), &payment("p-dead")).await;
    assert_eq!((first.status, &first.body[..]), (200, &b"success"[..]));
    let dead = until_state(gate.admin, "p-dead", "dead").await;
    let hash = dead["key_hash"].as_str().unwrap().to_owned();
    let calls = handler.calls();

    let shown = cli_at(gate.admin, &["inbox", "show", "pay", "--hash", &hash])
        .await
        .ok();
    assert!(
        shown.stdout.contains("handler answered 503"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .lines()
            .any(|l| l.starts_with("state ") && l.ends_with(" dead")),
        "{}",
        shown.stdout
    );

    let listed = cli_at(gate.admin, &["inbox", "list", "pay", "--state", "dead"])
        .await
        .ok();
    let mut lines = listed.stdout.lines();
    assert!(
        lines.next().unwrap().starts_with("KEY HASH"),
        "{}",
        listed.stdout
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..3],
        &[hash.as_str(), "dead", "1/1"],
        "{}",
        listed.stdout
    );
    let page = cli_at(
        gate.admin,
        &["--json", "inbox", "list", "pay", "--state", "dead", "--all"],
    )
    .await
    .ok()
    .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1, "{page}");
    let queued = cli_at(gate.admin, &["inbox", "list", "pay", "--state", "queued"])
        .await
        .ok();
    assert_eq!(queued.stdout, "no queued deliveries on route pay\n");

    // Retry: one attempt now (the handler still fails: dead again).
    let retried = cli_at(
        gate.admin,
        &[
            "--json", "inbox", "retry", "pay", "--key", "p-dead", "--state", "dead",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(retried["state"], "queued", "{retried}");
    until_state(gate.admin, "p-dead", "dead").await;
    assert_eq!(handler.calls(), calls + 1, "the retry sent it once");

    // A drop says the state it saw: another one changes nothing.
    let stale = [
        "inbox", "drop", "pay", "--key", "p-dead", "--state", "queued",
    ];
    let refused = cli_at(gate.admin, &stale).await;
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("reason delivery_changed") && refused.stderr.contains("dead now"),
        "{refused:?}"
    );
    // Drop: resolved without sending; copies still get the ack.
    let drop = ["inbox", "drop", "pay", "--key", "p-dead", "--state", "dead"];
    let dropped = cli_at(gate.admin, &drop).await.ok();
    assert!(
        dropped
            .stdout
            .lines()
            .any(|l| l.starts_with("state ") && l.ends_with(" dropped")),
        "{}",
        dropped.stdout
    );
    let empty = cli_at(gate.admin, &["inbox", "list", "pay", "--state", "dead"])
        .await
        .ok();
    assert_eq!(empty.stdout, "no dead deliveries on route pay\n");
    let copy = deliver(&gate.url("/notify"), &payment("p-dead")).await;
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));
    assert_eq!(handler.calls(), calls + 1);
    let nobody = cli_at(gate.admin, &["inbox", "show", "pay", "--key", "nobody"]).await;
    assert_eq!(nobody.code, Some(1), "{nobody:?}");
    assert!(
        nobody.stderr.contains("reason delivery_not_found"),
        "{nobody:?}"
    );

    // The audit trail: the retry, the stale drop and the drop, newest first.
    let trail = cli_at(gate.admin, &["--json", "audit"]).await.ok().json();
    let rows: Vec<(String, String, String, String)> = trail["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |name: &str| e[name].as_str().unwrap_or("-").to_owned();
            (
                text("action"),
                text("before"),
                text("after"),
                text("outcome"),
            )
        })
        .collect();
    let row = |a: &str, b: &str, c: &str, d: &str| (a.into(), b.into(), c.into(), d.into());
    assert_eq!(
        rows,
        [
            row("drop", "dead", "dropped", "done"),
            row("drop", "dead", "dead", "delivery_changed"),
            row("retry", "dead", "queued", "done"),
        ],
        "{trail}"
    );
    assert!(
        trail["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["target"] == hash.as_str()),
        "{trail}"
    );
    gate.stop().await;
}

/// 60 dead deliveries listed ten a page while the operator drops the first
/// five of each page shown and new deliveries die meanwhile: following
/// `next_cursor` shows every delivery that was dead when the walk began,
/// each once (a keyset cursor: acting on shown items moves nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_paging_neither_hides_nor_repeats_while_the_operator_acts() {
    let redis = RedisServer::start();
    let handler = Upstream::scripted(|_, _| Reply::status(503)).await;
    let gate = Gate::start(&dying_inbox(&redis, &handler)).await;
    let ids: Vec<String> = (0..60).map(|n| format!("p-many-{n}")).collect();
    for id in &ids {
        let answer = deliver(&gate.url("/notify"), &payment(id)).await;
        assert_eq!(answer.status, 200);
    }
    let api = |path: String| {
        let url = format!("http://{}{path}", gate.admin);
        async move {
            let headers = vec![(
                "authorization".to_owned(),
                format!("Bearer {}", super::TOKEN),
            )];
            let method = if url.contains("/drop?") {
                "POST"
            } else {
                "GET"
            };
            send(method, &url, &headers, "").await
        }
    };
    poll(
        "all 60 deliveries dead",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let page = api("/admin/inbox/pay?state=dead&limit=500".into()).await;
            let page: serde_json::Value = serde_json::from_slice(&page.body).unwrap();
            (page["items"].as_array().unwrap().len() == 60).then_some(())
        },
    )
    .await;

    let mut shown: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    for page_number in 0.. {
        assert!(page_number < 30, "no last page");
        let path = match &cursor {
            Some(c) => format!("/admin/inbox/pay?state=dead&limit=10&cursor={c}"),
            None => "/admin/inbox/pay?state=dead&limit=10".into(),
        };
        let page: serde_json::Value = serde_json::from_slice(&api(path).await.body).unwrap();
        let hashes: Vec<String> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["key_hash"].as_str().unwrap().to_owned())
            .collect();
        for hash in hashes.iter().take(5) {
            let dropped = api(format!(
                "/admin/inbox/pay/drop?hash={hash}&expect_state=dead"
            ))
            .await;
            assert_eq!(
                dropped.status,
                200,
                "{}",
                String::from_utf8_lossy(&dropped.body)
            );
        }
        // A new arrival dies meanwhile: listed after the others, if at all.
        deliver(
            &gate.url("/notify"),
            &payment(&format!("p-late-{page_number}")),
        )
        .await;
        shown.extend(hashes);
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert!(page.get("next_cursor").is_some(), "null, not absent");
                break;
            }
        }
    }
    let unique: std::collections::BTreeSet<&String> = shown.iter().collect();
    assert_eq!(unique.len(), shown.len(), "a delivery shown twice");
    let original: Vec<String> = ids
        .iter()
        .map(|id| {
            hex::encode(idemgate::pipeline::admit::identify::hash_key_parts([
                id.as_bytes()
            ]))
        })
        .collect();
    let hidden = original
        .iter()
        .filter(|hash| !unique.contains(hash))
        .count();
    assert_eq!(hidden, 0, "{hidden} of 60 dead deliveries never shown");
    gate.stop().await;
}
