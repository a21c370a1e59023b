//! A real Prometheus scraping idemgate evaluates every dashboard and alert
//! expression to a value (the dashboard's variables substituted, and
//! nothing at all for a job that does not exist), the contract's hit rate
//! to the ratio the traffic implies, and the hit-rate stat to 0 before any
//! traffic.

use super::grafana::{Vars, dashboard_expressions, dashboard_variables};
use super::*;

/// The hit rate of docs/contract.md §7, verbatim.
const CONTRACT_HIT_RATE: &str = r#"sum(rate(idemgate_requests_total{outcome="replayed"}[5m])) / sum(rate(idemgate_requests_total{outcome=~"forwarded|replayed"}[5m]))"#;

/// The hot-key gauges (`idemgate_hot_key_*`) come with the hot-key
/// tracker; a binary without them yields no value for the queries that
/// read them, which Prometheus must still accept.
const HOT_KEY_METRICS: &str = "idemgate_hot_key_";

/// The dashboard's hit-rate stat panel.
const HIT_RATE_STAT: &str = "Hit rate (5m)";

/// An inbox on route `pay`, so the inbox series exist (at 0) for the
/// dashboard and alert expressions. Valid against the test route: the
/// visibility timeout (default 60 s) exceeds the upstream timeout (5 s)
/// by more than the 1 s margin. The test's handler always answers 200, so
/// nothing is queued.
const INBOX: &str = "[route.inbox]\nmax_backoff = \"1m\"\n";

/// A second route with `[route.entity]`, so the entity series exist (at
/// 0) for the alert expressions; no traffic reaches it.
const ENTITY_ROUTE: &str = r#"
[[route]]
name = "orders"
path_prefix = "/orders"
[route.signature]
scheme = "none"
[route.idempotency]
key = ["json:/id"]
[route.entity]
id = ["json:/order"]
state = "json:/status"
transitions = ["pending -> paid"]
ack_status = 200
"#;

/// Whether a panel expression reads 0 rather than nothing when its
/// series have no value (a stat that must not show "No data" when idle).
fn fills_zero(expr: &str) -> bool {
    expr.ends_with("or vector(0)")
}

/// The inbox gauges report the shared backlog of a scope: every instance
/// reports the same value, so any `sum` would multiply it by the number of
/// instances. Every dashboard and alert expression reading them aggregates
/// with `max`, and the dashboard shows all four inbox metrics.
#[test]
fn shared_inbox_gauges_are_aggregated_with_max() {
    const SHARED: [&str; 4] = [
        "idemgate_inbox_queued",
        "idemgate_inbox_oldest_age_seconds",
        "idemgate_inbox_dead",
        "idemgate_inbox_books",
    ];
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_path("config/prometheus/alerts.yml")).expect("alerts.yml"),
    )
    .expect("alerts.yml is YAML");
    let alerts = rules["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_sequence().expect("rules").iter())
        .map(|rule| {
            let name = rule["alert"].as_str().or(rule["record"].as_str());
            let expr = rule["expr"].as_str().expect("rule expr");
            (format!("rule {}", name.unwrap_or("?")), expr.to_owned())
        });
    let dashboard = dashboard_expressions(&Vars::all());
    for metric in SHARED
        .iter()
        .chain(["idemgate_inbox_redeliveries_total"].iter())
    {
        assert!(
            dashboard.iter().any(|(_, expr)| expr.contains(metric)),
            "no dashboard panel shows {metric}"
        );
    }
    let mut checked = 0;
    for (what, expr) in dashboard
        .into_iter()
        .map(|(panel, expr)| (format!("panel {panel:?}"), expr))
        .chain(alerts)
    {
        if !SHARED.iter().any(|metric| expr.contains(metric)) {
            continue;
        }
        checked += 1;
        let compact: String = expr.split_whitespace().collect();
        assert!(
            compact.starts_with("maxby(")
                && !compact.contains("sum(")
                && !compact.contains("sumby("),
            "{what}: {expr} must aggregate the shared inbox gauges with max, never sum"
        );
    }
    assert!(checked >= 5, "{checked} expressions read the inbox gauges");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus"]
async fn real_prometheus_evaluates_every_dashboard_and_alert_expression() {
    const FIRST: usize = 20;
    const REPLAYS_EACH: usize = 3;
    const FORGED: usize = 3;
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    // Per-key hot-key series too, so the hot-keys table's queries have
    // values (the replays below are the duplicates they need).
    let text = config_text(&redis_store(&redis), &upstream.url(), INBOX)
        + "\n[hot_keys]\nexport_keys = true\n"
        + ENTITY_ROUTE;
    let gate = GateProcess::start(&text);
    let prometheus = Prometheus::start(&prometheus_config(gate.admin));
    let started = Instant::now();

    poll(
        "Prometheus ready",
        WAIT,
        Duration::from_millis(100),
        async || {
            let ok = http_get(&format!("{}/-/ready", prometheus.url)).await;
            matches!(ok, Ok((200, _))).then_some(())
        },
    )
    .await;
    poll(
        "the idemgate target to be up",
        WAIT,
        Duration::from_millis(100),
        async || {
            let doc = prometheus.api("/api/v1/targets").await;
            doc["data"]["activeTargets"]
                .as_array()?
                .iter()
                .any(|t| t["labels"]["job"] == "idemgate" && t["health"] == "up")
                .then_some(())
        },
    )
    .await;
    // The zero-valued series are in the TSDB before any traffic.
    until_scraped_replays(&prometheus, 0.0, "a scrape of the idle gate").await;
    println!("prometheus up and scraping after {:?}", started.elapsed());

    // No traffic yet. Two scrapes, so that rate() has a value (0): the
    // contract's ratio is then 0 / 0 = NaN, and the dashboard's hit-rate
    // stat must read 0 instead.
    let scrapes = r#"count_over_time(up{job="idemgate"}[1h])"#;
    poll(
        "two scrapes of the idle gate",
        WAIT,
        Duration::from_millis(100),
        async || (prometheus.scalar(scrapes).await? >= 2.0).then_some(()),
    )
    .await;
    let vars = Vars::one("idemgate", gate.admin);
    let stat = dashboard_expressions(&vars)
        .into_iter()
        .find(|(panel, _)| panel == HIT_RATE_STAT)
        .map(|(_, expr)| expr)
        .expect("the hit-rate stat panel");
    let idle = prometheus.values(&stat).await;
    println!("idle hit-rate stat: {stat} => {idle:?}");
    assert_eq!(idle, [0.0], "{HIT_RATE_STAT} without traffic: {stat}");
    for (panel, expr) in dashboard_expressions(&vars) {
        if fills_zero(&expr) {
            let idle = prometheus.values(&expr).await;
            assert_eq!(idle, [0.0], "{panel} without traffic: {expr}");
        }
    }
    let contract_idle = prometheus.values(CONTRACT_HIT_RATE).await;
    assert!(
        contract_idle.iter().all(|v| v.is_nan()),
        "the bare contract ratio is NaN (or nothing) without traffic: {contract_idle:?}"
    );

    // Traffic: 20 first deliveries, 3 replays of each (half signed with the
    // previous secret), some forged and stale deliveries, one unmatched
    // request. Histograms and the secret-index counter are created by their
    // first event, and rate() can not see the increase that creates a
    // series, so a warm-up slice of every kind (both secrets included) goes
    // first and is scraped before the rest.
    let url = gate.url("/notify");
    let ids: Vec<usize> = (0..FIRST).collect();
    let (warm_up, rest) = ids.split_at(2);
    for (phase, ids) in [("warm-up", warm_up), ("main", rest)] {
        for &i in ids {
            let body = payment(&format!("prom-{i}"));
            let answer = post(&url, &signed(&body), &body).await;
            assert_eq!((answer.status, answer.replayed()), (200, Some("false")));
        }
        for _ in 0..REPLAYS_EACH {
            for &i in ids {
                let body = payment(&format!("prom-{i}"));
                let secret = if i % 2 == 0 { SECRET } else { PREVIOUS_SECRET };
                let answer = post(&url, &signed_now(secret, &body), &body).await;
                assert_eq!((answer.status, answer.replayed()), (200, Some("true")));
            }
        }
        let forged = if phase == "warm-up" { 0..1 } else { 1..FORGED };
        for i in forged {
            let body = payment(&format!("forged-{i}"));
            let answer = post(&url, &signed_now("wrong", &body), &body).await;
            assert_eq!(answer.reason().as_deref(), Some("signature_invalid"));
            let answer = post(&url, &signed_with(SECRET, now_secs() - 3600, &body), &body).await;
            assert_eq!(answer.reason().as_deref(), Some("timestamp_out_of_window"));
        }
        assert_eq!(post(&gate.url("/other"), &[], "x").await.status, 200);
        let replays = (ids.len() * REPLAYS_EACH) as f64;
        if phase == "warm-up" {
            until_scraped_replays(&prometheus, replays, "a scrape after the warm-up").await;
        }
    }
    let replays = (FIRST * REPLAYS_EACH) as f64;
    let expected_hit_rate = replays / (replays + FIRST as f64);

    // Wait until Prometheus has the final counts, then three more scrapes.
    until_scraped_replays(&prometheus, replays, "a scrape after the traffic").await;
    let before = prometheus.scalar(scrapes).await.expect("scrape count");
    poll(
        "three more scrapes",
        WAIT,
        Duration::from_millis(200),
        async || {
            let now = prometheus.scalar(scrapes).await?;
            (now >= before + 3.0).then_some(())
        },
    )
    .await;

    // The variables' queries, each narrowed by the ones before it. This
    // Prometheus adds no `namespace` label: that variable has no values,
    // and "All" (`.*`) matches the series without the label.
    let admin = gate.admin.to_string();
    for variable in dashboard_variables() {
        let doc = prometheus.api(&variable.api_path(&vars)).await;
        assert_eq!(
            doc["status"], "success",
            "variable {}: {doc}",
            variable.name
        );
        let values: Vec<&str> = doc["data"]
            .as_array()
            .expect("label values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        println!("variable {}: {values:?}", variable.name);
        let expected: &[&str] = match variable.name.as_str() {
            "job" => &["idemgate"],
            "namespace" => &[],
            "instance" => &[admin.as_str()],
            "route" => &["_unmatched", "orders", "pay"],
            other => panic!("unexpected variable {other}"),
        };
        assert_eq!(values, expected, "variable {}", variable.name);
    }

    // Does this binary export the hot-key gauges?
    let hot_keys = !prometheus
        .query(&format!("{{__name__=~\"{HOT_KEY_METRICS}.*\"}}"))
        .await
        .is_empty();
    println!("hot-key gauges exported: {hot_keys}");

    // Every dashboard expression, with this job and instance selected,
    // yields at least one finite value.
    let dashboard = dashboard_expressions(&vars);
    assert!(
        dashboard.len() >= 22,
        "{} dashboard expressions",
        dashboard.len()
    );
    for (panel, expr) in &dashboard {
        let values = prometheus.values(expr).await;
        println!("dashboard {panel:?}: {expr} => {values:?}");
        if !hot_keys && expr.contains(HOT_KEY_METRICS) {
            continue;
        }
        assert!(
            values.iter().any(|v| v.is_finite()),
            "panel {panel:?}: {expr} gave no finite value: {values:?}"
        );
    }
    // With a job that does not exist selected, every panel is empty (the
    // filter is applied), except the stats that fill in 0 (`or vector(0)`:
    // the hit rate, the 5xx senders see, the eviction risk).
    for (panel, expr) in dashboard_expressions(&Vars::one("no-such-job", gate.admin)) {
        let values = prometheus.values(&expr).await;
        let expected: &[f64] = if fills_zero(&expr) { &[0.0] } else { &[] };
        assert_eq!(values, expected, "panel {panel:?} for another job: {expr}");
    }

    // Every answer's status class as Prometheus scraped it: the forged
    // and stale deliveries were answered 401, everything else 200.
    let class = async |class: &str| {
        let expr = format!(r#"sum(idemgate_requests_total{{status_class="{class}"}})"#);
        prometheus.scalar(&expr).await.expect(&expr)
    };
    let passthrough = 2.0;
    assert_eq!(class("4xx").await, (2 * FORGED) as f64);
    assert_eq!(
        class("2xx").await,
        (FIRST + FIRST * REPLAYS_EACH) as f64 + passthrough
    );
    assert_eq!(class("5xx").await, 0.0);

    // The inbox series of route pay exist from start-up, at 0: one per
    // gauge and one per redelivery result.
    for gauge in [
        "idemgate_inbox_queued",
        "idemgate_inbox_oldest_age_seconds",
        "idemgate_inbox_dead",
    ] {
        let value = prometheus
            .scalar(&format!(r#"{gauge}{{route="pay"}}"#))
            .await;
        assert_eq!(value, Some(0.0), "{gauge}");
    }
    let results = prometheus
        .values(r#"idemgate_inbox_redeliveries_total{route="pay"}"#)
        .await;
    assert_eq!(results, [0.0; 4], "one zero counter per result");

    // The hit rate of docs/contract.md §7, verbatim, and the dashboard's
    // own hit-rate panels.
    let measured = prometheus
        .scalar(CONTRACT_HIT_RATE)
        .await
        .expect("one hit-rate value");
    println!("hit rate: Prometheus {measured}, expected {expected_hit_rate}");
    assert!(
        (measured - expected_hit_rate).abs() <= 0.01 * expected_hit_rate,
        "hit rate {measured}, expected {expected_hit_rate}"
    );
    for (panel, expr) in dashboard.iter().filter(|(p, _)| p.starts_with("Hit rate")) {
        let values: Vec<f64> = prometheus
            .values(expr)
            .await
            .into_iter()
            .filter(|v| v.is_finite())
            .collect();
        assert_eq!(values.len(), 1, "{panel}: {values:?}");
        assert!(
            (values[0] - expected_hit_rate).abs() <= 0.01 * expected_hit_rate,
            "{panel}: {} vs {expected_hit_rate}",
            values[0]
        );
    }

    // Rules as Prometheus loaded them: every one healthy after evaluation.
    let rules = poll(
        "every rule evaluated without error",
        WAIT,
        Duration::from_millis(200),
        async || {
            let doc = prometheus.api("/api/v1/rules").await;
            let rules: Vec<Value> = doc["data"]["groups"]
                .as_array()?
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            if let Some(bad) = rules.iter().find(|r| r["health"] == "err") {
                panic!("rule failed in Prometheus: {bad}");
            }
            (!rules.is_empty() && rules.iter().all(|r| r["health"] == "ok")).then_some(rules)
        },
    )
    .await;
    assert!(rules.len() >= 6, "{} rules loaded", rules.len());
    for rule in &rules {
        let name = rule["name"].as_str().expect("rule name");
        let query = rule["query"].as_str().expect("rule query");
        let full = prometheus.values(query).await;
        if rule["type"] == "alerting" {
            for key in ["summary", "description"] {
                assert!(
                    rule["annotations"][key]
                        .as_str()
                        .is_some_and(|s| !s.is_empty()),
                    "{name}: annotation {key}"
                );
            }
            assert!(rule["labels"]["severity"].is_string(), "{name}: severity");
            assert!(
                rule["duration"].as_f64().is_some_and(|d| d > 0.0),
                "{name}: for"
            );
            let lhs = threshold_lhs(query);
            let values = prometheus.values(&lhs).await;
            println!("alert {name}: {lhs} => {values:?} (firing part: {full:?})");
            if !hot_keys && lhs.contains(HOT_KEY_METRICS) {
                continue;
            }
            assert!(
                values.iter().any(|v| v.is_finite()),
                "alert {name}: {lhs} gave no finite value: {values:?}"
            );
        } else {
            println!("rule {name}: {query} => {full:?}");
            assert!(!full.is_empty(), "recording rule {name} is empty");
        }
    }

    // 75 % replays is above the hit-rate alert's threshold: Prometheus has
    // it pending (its `for` is far longer than this test).
    let alerts = poll(
        "IdemgateHitRateHigh to be pending",
        WAIT,
        Duration::from_millis(200),
        async || {
            let doc = prometheus.api("/api/v1/alerts").await;
            let alerts = doc["data"]["alerts"].as_array()?.clone();
            alerts
                .iter()
                .any(|a| {
                    a["labels"]["alertname"] == "IdemgateHitRateHigh"
                        && a["labels"]["route"] == "pay"
                        && a["state"] == "pending"
                })
                .then_some(alerts)
        },
    )
    .await;
    let names: Vec<String> = alerts
        .iter()
        .map(|a| format!("{}:{}", a["labels"]["alertname"], a["state"]))
        .collect();
    println!("active alerts: {names:?}");
    println!("whole test took {:?}", started.elapsed());
}
