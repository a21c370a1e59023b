//! Hot keys end to end: the real binary on Redis, a sender retrying one
//! key among many, read back through `/admin/hot-keys` and `/metrics`.

use idemgate::pipeline::admit::identify::hash_key_parts;

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
/// `pay` with its value, most deliveries first (ties by key).
fn exported(exposition: &Exposition) -> Vec<(String, f64)> {
    let mut rows: Vec<(String, f64)> = exposition
        .series("idemgate_hot_key_deliveries")
        .into_iter()
        .map(|s| {
            assert_eq!(s.labels.get("route").map(String::as_str), Some("pay"));
            assert!(!s.labels.contains_key("rank"), "{:?}", s.labels);
            (s.labels["key"].clone(), s.value)
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// A gate on Redis with `[hot_keys]` set to `hot_keys` (plus `k = 3`) and
/// an admin token.
fn hot_config(redis: &RedisServer, upstream: &Upstream, hot_keys: &str) -> String {
    format!(
        "{}\n[hot_keys]\nk = 3\nwindow = \"1m\"\n{hot_keys}\n[admin]\ntoken = \"literal:{TOKEN}\"\n",
        config_text(&redis_store(redis), &upstream.url(), "")
    )
}

/// One key delivered 20 times (19 duplicates), then 15 keys once each.
async fn loop_then_singles(url: &str) {
    for _ in 0..20 {
        assert_eq!(deliver(url, &payment("p-loop")).await.status, 200);
    }
    for n in 0..15 {
        assert_eq!(
            deliver(url, &payment(&format!("p-once-{n}"))).await.status,
            200
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retrying_sender_tops_the_hot_keys() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let mut gate = GateProcess::start(&hot_config(&redis, &upstream, "export_keys = true"));

    assert_eq!(hot_keys(&gate, "", None).await.status, 401);
    assert_eq!(hot_keys(&gate, "", Some("wrong")).await.status, 401);

    let url = gate.url("/notify");
    loop_then_singles(&url).await;
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

    // /metrics: only keys that had duplicates, without a rank; the
    // singles of the top 3 are not exported.
    let exposition = scrape(gate.admin).await;
    assert_eq!(exported(&exposition), [(key_of("p-loop"), 20.0)]);
    let labels = [("route", "pay"), ("key", &*key_of("p-loop"))];
    assert_eq!(
        exposition.value("idemgate_hot_key_duplicates", &labels),
        Some(19.0)
    );
    assert_eq!(exposition.series("idemgate_hot_key_duplicates").len(), 1);
    assert_eq!(
        exposition.value("idemgate_hot_key_max_deliveries", &[("route", "pay")]),
        Some(20.0)
    );
    assert_eq!(
        exposition.value("idemgate_hot_key_window_seconds", &[]),
        Some(60.0)
    );

    // Two keys retried three times each join it; the single deliveries
    // they push out of the top 3 never had a series.
    for id in ["p-warm-a", "p-warm-b"] {
        for _ in 0..3 {
            assert_eq!(deliver(&url, &payment(id)).await.status, 200);
        }
    }
    let mut warm = vec![(key_of("p-warm-a"), 3.0), (key_of("p-warm-b"), 3.0)];
    warm.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = vec![(key_of("p-loop"), 20.0)];
    expected.extend(warm);
    assert_eq!(exported(&scrape(gate.admin).await), expected);
    gate.terminate();
}

/// By default no series names a key: the same traffic (one looping key,
/// fifteen singles) exports one key-less maximum per route, so the series
/// set does not grow with the keys senders use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_only_the_key_less_maximum_is_exported() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let mut gate = GateProcess::start(&hot_config(&redis, &upstream, ""));
    let exposition = scrape(gate.admin).await;
    assert_eq!(
        exposition.value("idemgate_hot_key_max_deliveries", &[("route", "pay")]),
        Some(0.0),
        "an idle route reports 0"
    );
    loop_then_singles(&gate.url("/notify")).await;
    let exposition = scrape(gate.admin).await;
    assert_eq!(
        exposition.value("idemgate_hot_key_max_deliveries", &[("route", "pay")]),
        Some(20.0)
    );
    for family in ["idemgate_hot_key_deliveries", "idemgate_hot_key_duplicates"] {
        assert!(exposition.series(family).is_empty(), "{family} exported");
    }
    // The keys are still one request away.
    let answer = hot_keys(&gate, "?route=pay", Some(TOKEN)).await;
    let view: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(
        view["routes"][0]["keys"][0]["key"],
        key_of("p-loop").as_str()
    );
    gate.terminate();
}
