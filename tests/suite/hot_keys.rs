//! Hot keys end to end: the real binary on Redis, a sender retrying one
//! key among many, read back through `/admin/hot-keys` and `/metrics`.

use idemgate::pipeline::identify::hash_key_parts;

use crate::support::*;

const TOKEN: &str = "hot-keys-token";

/// The key hash the gate logs (and exports) for payment `id`.
fn key_of(id: &str) -> String {
    hex::encode(hash_key_parts([id.as_bytes()]))
}

async fn hot_keys(gate: &GateProcess, query: &str, token: Option<&str>) -> Answer {
    let headers: Headers = token
        .map(|t| vec![("authorization".to_owned(), format!("Bearer {t}"))])
        .unwrap_or_default();
    send(
        "GET",
        &format!("http://{}/admin/hot-keys{query}", gate.admin),
        &headers,
        "",
    )
    .await
}

/// The `key` label of each `idemgate_hot_key_deliveries` series of route
/// `pay`, by rank, with its value.
fn exported(exposition: &Exposition) -> Vec<(String, String, f64)> {
    let mut rows: Vec<(String, String, f64)> = exposition
        .series("idemgate_hot_key_deliveries")
        .into_iter()
        .map(|s| {
            assert_eq!(s.labels.get("route").map(String::as_str), Some("pay"));
            (s.labels["rank"].clone(), s.labels["key"].clone(), s.value)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retrying_sender_tops_the_hot_keys() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = format!(
        "{}\n[hot_keys]\nk = 3\nwindow = \"1m\"\n\n[admin]\ntoken = \"literal:{TOKEN}\"\n",
        config_text(&redis_store(&redis), &upstream.url(), "")
    );
    let mut gate = GateProcess::start(&text);

    assert_eq!(hot_keys(&gate, "", None).await.status, 401);
    assert_eq!(hot_keys(&gate, "", Some("wrong")).await.status, 401);

    let url = gate.url("/notify");
    for _ in 0..20 {
        assert_eq!(deliver(&url, &payment("p-loop")).await.status, 200);
    }
    for n in 0..15 {
        assert_eq!(
            deliver(&url, &payment(&format!("p-once-{n}"))).await.status,
            200
        );
    }
    assert_eq!(upstream.calls(), 16);

    let answer = hot_keys(&gate, "", Some(TOKEN)).await;
    assert_eq!(answer.status, 200);
    let view: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(view["window_seconds"], 60);
    let routes = view["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0]["route"], "pay");
    let keys = routes[0]["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 3, "{view:#}");
    let top = &keys[0];
    assert_eq!(top["rank"], 1);
    assert_eq!(top["key"], key_of("p-loop").as_str());
    assert_eq!(top["deliveries"], 20);
    assert_eq!(top["duplicates"], 19);
    assert_eq!(top["last_outcome"], "replayed");
    assert!(top["last_reason"].is_null(), "{top}");
    assert!(top["last_seen_unix_ms"].as_u64().unwrap() > 1_700_000_000_000);
    for (index, key) in keys.iter().enumerate().skip(1) {
        assert_eq!(key["rank"], index + 1);
        assert_eq!(
            (&key["deliveries"], &key["duplicates"]),
            (&1.into(), &0.into())
        );
        assert_eq!(key["last_outcome"], "forwarded");
    }

    let one = hot_keys(&gate, "?route=pay", Some(TOKEN)).await;
    assert_eq!(one.status, 200);
    let one: serde_json::Value = serde_json::from_slice(&one.body).unwrap();
    assert_eq!(one["routes"].as_array().unwrap().len(), 1);
    let unknown = hot_keys(&gate, "?route=nope", Some(TOKEN)).await;
    assert_eq!(
        (unknown.status, unknown.reason().as_deref()),
        (404, Some("unknown_route"))
    );
    let bad = hot_keys(&gate, "?rank=1", Some(TOKEN)).await;
    assert_eq!(
        (bad.status, bad.reason().as_deref()),
        (400, Some("bad_request"))
    );

    // /metrics: exactly k series, rank 1 the looping key.
    let exposition = scrape(gate.admin).await;
    let rows = exported(&exposition);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0], ("1".into(), key_of("p-loop"), 20.0));
    let labels = [("route", "pay"), ("rank", "1"), ("key", &*key_of("p-loop"))];
    assert_eq!(
        exposition.value("idemgate_hot_key_duplicates", &labels),
        Some(19.0)
    );
    assert_eq!(
        exposition.value("idemgate_hot_key_window_seconds", &[]),
        Some(60.0)
    );
    let displaced: Vec<String> = rows[1..].iter().map(|row| row.1.clone()).collect();

    // Two keys retried three times each push the single deliveries out:
    // their series are gone from the next scrape.
    for id in ["p-warm-a", "p-warm-b"] {
        for _ in 0..3 {
            assert_eq!(deliver(&url, &payment(id)).await.status, 200);
        }
    }
    let rows = exported(&scrape(gate.admin).await);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0], ("1".into(), key_of("p-loop"), 20.0));
    let mut warm: Vec<String> = rows[1..].iter().map(|row| row.1.clone()).collect();
    warm.sort();
    let mut expected = vec![key_of("p-warm-a"), key_of("p-warm-b")];
    expected.sort();
    assert_eq!(warm, expected);
    assert!(rows[1..].iter().all(|row| row.2 == 3.0), "{rows:?}");
    for key in displaced {
        assert!(!rows.iter().any(|row| row.1 == key), "{key} still exported");
    }
    gate.terminate();
}
