//! `/metrics` holds exactly the counts a scripted mix of deliveries must
//! produce: named traffic phases fill a [`Tally`], then one check per metric
//! family compares the scrape with it.

use super::*;

/// Both routes of the test configuration.
const ROUTES: [&str; 2] = ["pay", "_unmatched"];

/// Every `outcome` label of `idemgate_requests_total`.
const OUTCOMES: [&str; 6] = [
    "forwarded",
    "replayed",
    "rejected",
    "passthrough",
    "unprotected",
    "shadow_duplicate",
];

/// The `status_class` series of `idemgate_requests_total` each outcome has
/// from start-up: idemgate's own 4xx/5xx for a rejection, any class of a
/// final answer for the others (docs/contract.md §7).
fn status_classes(outcome: &str) -> &'static [&'static str] {
    if outcome == "rejected" {
        &["4xx", "5xx"]
    } else {
        &["2xx", "3xx", "4xx", "5xx"]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_text_has_exact_counter_values() {
    let mut redis = RedisServer::start();
    let upstream = scripted_upstream().await;
    let gate = start_gate(&redis, &upstream);
    let url = gate.url("/notify");
    let mut tally = Tally::default();

    assert_every_counter_pre_registered(gate.admin).await;
    first_deliveries_and_replays(&url, &mut tally).await;
    authenticity_rejections(&url, &mut tally).await;
    identity_rejections(&url, &mut tally).await;
    size_passthrough_and_upstream_500(&url, &gate.url("/other"), &mut tally).await;
    duplicate_in_flight(&url, &upstream, &mut tally).await;
    upstream_timeout_then_unknown(&url, &mut tally).await;
    store_down(&mut redis, &url, &mut tally).await;

    let metrics = scrape(gate.admin).await;
    println!("tally: {tally:?}");
    let first_deliveries = assert_requests(&metrics, &tally);
    assert_rejections(&metrics, &tally);
    assert_secret_matches(&metrics, &tally);
    assert_upstream_errors_unknowns_and_in_flight(&metrics);
    assert_store_operations(&metrics);
    assert_duration_histograms(&metrics, &tally, first_deliveries);
    assert_build_info(&metrics);
}

// ---- traffic phases ----------------------------------------------------------

/// The body decides what the upstream does, so the script is deterministic
/// whatever the arrival order.
async fn scripted_upstream() -> Upstream {
    Upstream::scripted(|_, body| {
        let body = String::from_utf8_lossy(body);
        if body.contains("hang-") {
            Reply::slow(Duration::from_millis(2500))
        } else if body.contains("slow-") {
            Reply::slow(Duration::from_millis(600))
        } else if body.contains("fail-") {
            Reply::status(500)
        } else {
            Reply::ok()
        }
    })
    .await
}

/// The binary with `on_in_flight = "conflict"`, a 1 KiB body limit and a
/// 1 s upstream timeout.
fn start_gate(redis: &RedisServer, upstream: &Upstream) -> GateProcess {
    let base = config_text(
        &redis_store(redis),
        &upstream.url(),
        "on_in_flight = \"conflict\"",
    );
    let text = base
        .replace("[limits]\n", "[limits]\nmax_body_bytes = 1024\n")
        .replace("timeout = \"5s\"", "timeout = \"1s\"");
    assert!(text.contains("max_body_bytes = 1024") && text.contains("timeout = \"1s\""));
    GateProcess::start(&text)
}

async fn assert_every_counter_pre_registered(admin: SocketAddr) {
    // Before any traffic: every counter series of every route exists at 0.
    let idle = scrape(admin).await;
    for route in ["pay", "_unmatched"] {
        for outcome in OUTCOMES {
            for class in status_classes(outcome) {
                assert_eq!(
                    idle.value(
                        "idemgate_requests_total",
                        &[
                            ("route", route),
                            ("outcome", outcome),
                            ("status_class", class)
                        ]
                    ),
                    Some(0.0),
                    "{route}/{outcome}/{class} pre-registered"
                );
            }
        }
    }
    assert_eq!(
        idle.series("idemgate_requests_total").len(),
        2 * 22,
        "only the pairs an outcome can produce"
    );
}

/// Delivers `body` signed with the current secret (index 0) and tallies
/// its answer under `name`.
async fn signed_delivery(
    url: &str,
    body: &str,
    tally: &mut Tally,
    name: &str,
    expect: Expect,
) -> Answer {
    let answer = post(url, &signed(body), body).await;
    tally.check(name, &answer, &expect.secret(0));
    answer
}

async fn first_deliveries_and_replays(url: &str, tally: &mut Tally) {
    // N = 6 first deliveries: four signed with the current secret, two with
    // the previous one.
    for i in 0..6 {
        let (secret, index) = if i < 4 {
            (SECRET, 0)
        } else {
            (PREVIOUS_SECRET, 1)
        };
        let body = payment(&format!("p-{i}"));
        let answer = post(url, &signed_now(secret, &body), &body).await;
        tally.check(
            &format!("first p-{i}"),
            &answer,
            &Expect::new(200, "forwarded").secret(index),
        );
    }
    // M = 5 replays, again under both secrets.
    for (id, secret, index) in [
        ("p-0", SECRET, 0),
        ("p-0", SECRET, 0),
        ("p-1", SECRET, 0),
        ("p-4", PREVIOUS_SECRET, 1),
        ("p-4", PREVIOUS_SECRET, 1),
    ] {
        let body = payment(id);
        let answer = post(url, &signed_now(secret, &body), &body).await;
        tally.check(
            &format!("replay {id}"),
            &answer,
            &Expect::new(200, "replayed").secret(index),
        );
    }
}

async fn authenticity_rejections(url: &str, tally: &mut Tally) {
    // Authenticity (stage 3): counted, no secret matched.
    let body = payment("forged-1");
    let answer = post(url, &signed_now("wrong-secret", &body), &body).await;
    tally.check(
        "wrong secret",
        &answer,
        &Expect::new(401, "rejected").reason("signature_invalid"),
    );
    let mut garbage = signed(&body);
    garbage[0].1 = "zz-not-hex".into();
    let answer = post(url, &garbage, &body).await;
    tally.check(
        "undecodable signature",
        &answer,
        &Expect::new(401, "rejected").reason("signature_invalid"),
    );
    let answer = post(url, &without(signed(&body), "x-signature"), &body).await;
    tally.check(
        "no signature",
        &answer,
        &Expect::new(401, "rejected").reason("signature_missing"),
    );
    let answer = post(url, &without(signed(&body), "x-timestamp"), &body).await;
    tally.check(
        "no timestamp",
        &answer,
        &Expect::new(401, "rejected").reason("timestamp_missing"),
    );
    for (what, at) in [("stale", now_secs() - 3600), ("future", now_secs() + 3600)] {
        let body = payment(&format!("{what}-1"));
        let answer = post(url, &signed_with(SECRET, at, &body), &body).await;
        tally.check(
            what,
            &answer,
            &Expect::new(401, "rejected").reason("timestamp_out_of_window"),
        );
    }
}

async fn identity_rejections(url: &str, tally: &mut Tally) {
    // Identity (stage 4): verified, so the secret is counted.
    for (what, body, reason) in [
        ("no id", r#"{"amount":"1.00"}"#.to_owned(), "key_missing"),
        (
            "empty id",
            r#"{"id":"","amount":"1.00"}"#.to_owned(),
            "key_invalid",
        ),
        ("not json", "id=p-9&amount=1".to_owned(), "bad_request_body"),
    ] {
        let answer = post(url, &signed(&body), &body).await;
        tally.check(
            what,
            &answer,
            &Expect::new(400, "rejected").reason(reason).secret(0),
        );
    }
    // Same key, different request.
    let body = r#"{"id":"p-0","amount":"99.00","status":"PAID"}"#;
    let answer = post(url, &signed(body), body).await;
    tally.check(
        "reused key",
        &answer,
        &Expect::new(422, "rejected")
            .reason("fingerprint_mismatch")
            .secret(0),
    );
}

async fn size_passthrough_and_upstream_500(url: &str, other: &str, tally: &mut Tally) {
    // Stage 2, before verification.
    let body = payment(&"x".repeat(2000));
    let answer = post(url, &signed(&body), &body).await;
    tally.check(
        "too large",
        &answer,
        &Expect::new(413, "rejected").reason("body_too_large"),
    );
    // No route: forwarded untouched.
    let answer = post(other, &[], "hello").await;
    tally.check(
        "unmatched",
        &answer,
        &Expect::new(200, "passthrough").route("_unmatched"),
    );
    // Upstream answers 500: a forwarded first attempt, released.
    let body = payment("fail-1");
    let expect = Expect::new(500, "forwarded");
    signed_delivery(url, &body, tally, "upstream 500", expect).await;
}

async fn duplicate_in_flight(url: &str, upstream: &Upstream, tally: &mut Tally) {
    // A duplicate while the first delivery is in flight (on_in_flight =
    // "conflict"): 409 in_flight.
    let body = payment("slow-1");
    let calls = upstream.calls();
    let first = tokio::spawn({
        let (url, body) = (url.to_owned(), body.clone());
        async move { post(&url, &signed(&body), &body).await }
    });
    poll(
        "the slow delivery to reach the upstream",
        Duration::from_secs(5),
        Duration::from_millis(10),
        async || (upstream.calls() > calls).then_some(()),
    )
    .await;
    let expect = Expect::new(409, "rejected").reason("in_flight");
    signed_delivery(url, &body, tally, "duplicate in flight", expect).await;
    let answer = first.await.expect("first delivery task");
    tally.check(
        "slow first delivery",
        &answer,
        &Expect::new(200, "forwarded").secret(0),
    );
}

async fn upstream_timeout_then_unknown(url: &str, tally: &mut Tally) {
    // Upstream slower than upstream.timeout: 504, counted as forwarded with
    // reason upstream_timeout, recorded as unknown; the retry gets 409.
    let body = payment("hang-1");
    let expect = Expect::new(504, "forwarded").reason("upstream_timeout");
    signed_delivery(url, &body, tally, "upstream timeout", expect).await;
    let expect = Expect::new(409, "rejected").reason("outcome_unknown");
    signed_delivery(url, &body, tally, "retry of unknown", expect).await;
}

async fn store_down(redis: &mut RedisServer, url: &str, tally: &mut Tally) {
    // Store gone: 503 store_unavailable and one failed claim.
    redis.stop();
    let body = payment("nostore-1");
    let expect = Expect::new(503, "rejected").reason("store_unavailable");
    let answer = signed_delivery(url, &body, tally, "store down", expect).await;
    assert!(
        answer.header("retry-after").is_some(),
        "503 has Retry-After"
    );
}

// ---- checks per metric family ------------------------------------------------

/// Returns the number of first deliveries of route `pay`.
fn assert_requests(metrics: &Exposition, tally: &Tally) -> u64 {
    // idemgate_requests_total: every (route, outcome, status_class)
    // exactly, from the status each answer had.
    let routes = ROUTES;
    let mut expected = BTreeMap::new();
    for route in routes {
        for outcome in OUTCOMES {
            for class in status_classes(outcome) {
                expected.insert(
                    labels_of(&[
                        ("route", route),
                        ("outcome", outcome),
                        ("status_class", class),
                    ]),
                    tally.class(route, outcome, class) as f64,
                );
            }
        }
    }
    assert_eq!(
        tally.classes.values().sum::<u64>(),
        tally.outcomes.values().sum::<u64>()
    );
    metrics.assert_series("idemgate_requests_total", &expected);
    let (n, m) = (
        tally.outcome("pay", "forwarded"),
        tally.outcome("pay", "replayed"),
    );
    assert_eq!((n, m), (9, 5), "script: 6 + 3 first deliveries, 5 replays");
    assert_eq!(tally.outcome("pay", "rejected"), 14);
    n
}

fn assert_rejections(metrics: &Exposition, tally: &Tally) {
    let routes = ROUTES;
    // idemgate_rejections_total: every reason of both routes exactly.
    let mut expected = BTreeMap::new();
    for route in routes {
        for reason in idemgate::error::Reason::ALL.map(idemgate::error::Reason::as_str) {
            let count = tally
                .reasons
                .iter()
                .find(|((r, w), _)| *r == route && *w == reason)
                .map_or(0, |(_, n)| *n);
            expected.insert(
                labels_of(&[("route", route), ("reason", reason)]),
                count as f64,
            );
        }
    }
    metrics.assert_series("idemgate_rejections_total", &expected);
}

fn assert_secret_matches(metrics: &Exposition, tally: &Tally) {
    // Secret rotation.
    let mut expected = BTreeMap::new();
    for (index, count) in &tally.secrets {
        expected.insert(
            labels_of(&[("route", "pay"), ("secret_index", &index.to_string())]),
            *count as f64,
        );
    }
    assert_eq!(tally.secrets.get(&0), Some(&17));
    assert_eq!(tally.secrets.get(&1), Some(&4));
    metrics.assert_series("idemgate_secret_matches_total", &expected);
}

fn assert_upstream_errors_unknowns_and_in_flight(metrics: &Exposition) {
    let routes = ROUTES;
    // Upstream errors, unknown outcomes, in-flight gauge.
    let mut expected = BTreeMap::new();
    for route in routes {
        for kind in ["connect", "timeout", "status"] {
            let count = match (route, kind) {
                ("pay", "timeout" | "status") => 1.0,
                _ => 0.0,
            };
            expected.insert(labels_of(&[("route", route), ("kind", kind)]), count);
        }
    }
    metrics.assert_series("idemgate_upstream_errors_total", &expected);
    let expected = BTreeMap::from([
        (labels_of(&[("route", "pay")]), 1.0),
        (labels_of(&[("route", "_unmatched")]), 0.0),
    ]);
    metrics.assert_series("idemgate_unknown_outcomes_total", &expected);
    let expected = BTreeMap::from([
        (labels_of(&[("route", "pay")]), 0.0),
        (labels_of(&[("route", "_unmatched")]), 0.0),
    ]);
    metrics.assert_series("idemgate_in_flight", &expected);
}

fn assert_store_operations(metrics: &Exposition) {
    // Store: one failed claim while Redis was down, nothing else failed.
    let mut expected = BTreeMap::new();
    for op in ["claim", "complete", "release", "renew", "lookup", "purge"] {
        let count = if op == "claim" { 1.0 } else { 0.0 };
        expected.insert(labels_of(&[("op", op)]), count);
    }
    metrics.assert_series("idemgate_store_errors_total", &expected);
    // Claims: every verified, identified delivery (9 + 5 + 422 + 409 ×2 +
    // 503) that the replay cache did not answer (replays after a key's
    // first one may be hits). Completes: 6 + slow + unknown. Release: the 500.
    let hits = metrics
        .value("idemgate_replay_cache_hits_total", &[])
        .expect("replay cache hits");
    // At most: the second copies of p-0 and p-4, and the 422's reuse of p-0.
    assert!(hits <= 3.0, "replay cache hits: {hits}");
    for (op, count) in [("claim", 18.0 - hits), ("complete", 8.0), ("release", 1.0)] {
        assert_eq!(
            metrics.value("idemgate_store_duration_seconds_count", &[("op", op)]),
            Some(count),
            "store op {op}"
        );
    }
}

fn assert_duration_histograms(metrics: &Exposition, tally: &Tally, n: u64) {
    // Histograms: one observation per counted request, cumulative buckets.
    let bucket_series = metrics.series("idemgate_request_duration_seconds_bucket");
    for (route, outcome) in tally.outcomes.keys() {
        let labels = [("route", *route), ("outcome", *outcome)];
        let want = tally.outcome(route, outcome) as f64;
        assert_eq!(
            metrics.value("idemgate_request_duration_seconds_count", &labels),
            Some(want),
            "duration count {route}/{outcome}"
        );
        let mut buckets: Vec<(f64, f64)> = bucket_series
            .iter()
            .filter(|s| s.labels.get("route").map(String::as_str) == Some(*route))
            .filter(|s| s.labels.get("outcome").map(String::as_str) == Some(*outcome))
            .map(|s| (parse_float(&s.labels["le"]).expect("le"), s.value))
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(
            buckets.len(),
            18,
            "17 bounds and +Inf for {route}/{outcome}"
        );
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative");
        assert_eq!(buckets.last().copied(), Some((f64::INFINITY, want)));
    }
    assert_eq!(
        metrics.value(
            "idemgate_upstream_duration_seconds_count",
            &[("route", "pay")]
        ),
        Some(n as f64),
        "one upstream observation per first delivery"
    );
}

fn assert_build_info(metrics: &Exposition) {
    // Build info.
    let build: Vec<_> = metrics.series("idemgate_build_info");
    assert_eq!(build.len(), 1, "{build:?}");
    let revision = build[0].labels.get("revision").expect("revision label");
    assert!(!revision.is_empty());
    assert_eq!(
        build[0].labels,
        labels_of(&[
            ("version", env!("CARGO_PKG_VERSION")),
            ("revision", revision.as_str())
        ])
    );
    assert_eq!(build[0].value, 1.0);
}
