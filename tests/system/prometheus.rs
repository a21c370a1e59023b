//! Observability contract (SPEC §6, §7) against real processes on loopback:
//! the `idemgate` binary, `redis-server`, a real upstream, `promtool` and a
//! real `prometheus` server. Every child is stopped by PID when its guard
//! drops, and every wait is bounded.
//!
//! * the alert rules pass `promtool check rules`, and the promtool unit
//!   tests of `config/prometheus/alerts_test.yml` fire the upstream-down and
//!   eviction alerts on synthetic series;
//! * every alert's `runbook_url` names a heading of README.md;
//! * `/metrics` holds exactly the counts a scripted mix of deliveries must
//!   produce, read with a parser of the text exposition format;
//! * Prometheus scraping idemgate evaluates every expression of the bundled
//!   Grafana dashboard and alert rules to a value, and the SPEC hit rate to
//!   the ratio the traffic implies;
//! * `/readyz` follows Redis going away and coming back.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

/// Upper bound for every wait on a process or a scrape.
const WAIT: Duration = Duration::from_secs(30);

/// The second secret of the test route (`config_text`).
const PREVIOUS_SECRET: &str = "previous-secret";

// ---------------------------------------------------------------------------
// Scripted traffic and what it must count
// ---------------------------------------------------------------------------

/// Expected counter values, filled in as the script runs.
#[derive(Debug, Default)]
struct Tally {
    /// (route, outcome) → requests.
    outcomes: BTreeMap<(&'static str, &'static str), u64>,
    /// (route, reason) → rejections.
    reasons: BTreeMap<(&'static str, &'static str), u64>,
    /// secret index → verified deliveries on route `pay`.
    secrets: BTreeMap<usize, u64>,
}

/// What one request must produce.
struct Expect {
    status: u16,
    route: &'static str,
    outcome: &'static str,
    reason: Option<&'static str>,
    secret: Option<usize>,
}

impl Expect {
    fn new(status: u16, outcome: &'static str) -> Self {
        Self {
            status,
            route: "pay",
            outcome,
            reason: None,
            secret: None,
        }
    }

    fn reason(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    fn secret(mut self, index: usize) -> Self {
        self.secret = Some(index);
        self
    }

    fn route(mut self, route: &'static str) -> Self {
        self.route = route;
        self
    }
}

impl Tally {
    /// Checks one answer and counts what it must have counted.
    fn check(&mut self, what: &str, answer: &Answer, expect: &Expect) {
        assert_eq!(
            answer.status,
            expect.status,
            "{what}: status; body {:?}",
            String::from_utf8_lossy(&answer.body)
        );
        if let Some(reason) = expect.reason {
            assert_eq!(answer.reason().as_deref(), Some(reason), "{what}: reason");
            assert!(
                idemgate::error::Reason::ALL
                    .iter()
                    .any(|known| known.as_str() == reason),
                "{reason} is a SPEC reason"
            );
            *self.reasons.entry((expect.route, reason)).or_default() += 1;
        }
        match expect.outcome {
            // A first delivery that failed (504/502) is idemgate's own
            // problem document, not an upstream answer: no header then.
            "forwarded" if expect.reason.is_none() => {
                assert_eq!(answer.replayed(), Some("false"), "{what}");
            }
            "replayed" => assert_eq!(answer.replayed(), Some("true"), "{what}"),
            _ => {}
        }
        *self
            .outcomes
            .entry((expect.route, expect.outcome))
            .or_default() += 1;
        if let Some(index) = expect.secret {
            *self.secrets.entry(index).or_default() += 1;
        }
    }

    fn outcome(&self, route: &str, outcome: &str) -> u64 {
        self.outcomes
            .get(&(route, outcome))
            .copied()
            .unwrap_or_default()
    }
}

/// Headers of a delivery of `body` signed now with `secret`.
fn signed_now(secret: &str, body: &str) -> Headers {
    signed_with(secret, now_secs(), body)
}

async fn post(url: &str, headers: &[(String, String)], body: &str) -> Answer {
    tokio::time::timeout(
        Duration::from_secs(15),
        send("POST", url, headers, body.to_owned()),
    )
    .await
    .expect("the gate answers within 15 s")
}

fn without(headers: Headers, name: &str) -> Headers {
    headers.into_iter().filter(|(n, _)| n != name).collect()
}

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

/// Waits until Prometheus has scraped `replays` replayed deliveries of
/// route `pay`.
async fn until_scraped_replays(prometheus: &Prometheus, replays: f64, what: &str) {
    poll(what, WAIT, Duration::from_millis(100), async || {
        let v = prometheus
            .scalar(r#"idemgate_requests_total{route="pay",outcome="replayed"}"#)
            .await?;
        (v == replays).then_some(())
    })
    .await;
}

/// A `prometheus` server on a free loopback port, killed by PID on drop
/// (its [`Proc`]).
struct Prometheus {
    _child: Proc,
    url: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(config: &str) -> Self {
        let version = Command::new("prometheus").arg("--version").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "this test needs the `prometheus` server binary on PATH \
             (Debian/Ubuntu: apt-get install prometheus); running it failed: {version:?}"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Proc::spawn_logged(
            "prometheus",
            Command::new("prometheus")
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}")),
            log,
        );
        Self {
            _child: child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// GET an API path and return its JSON document.
    async fn api(&self, path_and_query: &str) -> Value {
        let (status, body) = http_get(&format!("{}{path_and_query}", self.url))
            .await
            .unwrap_or_else(|e| panic!("{path_and_query}: {e}\n{}", self.log()));
        serde_json::from_str(&body).unwrap_or_else(|e| {
            panic!("{path_and_query} answered {status} with non-JSON ({e}): {body}")
        })
    }

    /// Evaluates `expr` now; panics unless Prometheus reports success.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let encoded: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        let doc = self.api(&format!("/api/v1/query?query={encoded}")).await;
        assert_eq!(doc["status"], "success", "Prometheus refused {expr}: {doc}");
        doc["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{expr}: result is not a vector: {doc}"))
            .clone()
    }

    /// The sample values of an instant vector result.
    async fn values(&self, expr: &str) -> Vec<f64> {
        self.query(expr)
            .await
            .iter()
            .map(|series| {
                series["value"][1]
                    .as_str()
                    .and_then(parse_float)
                    .unwrap_or_else(|| panic!("{expr}: bad sample {series}"))
            })
            .collect()
    }

    /// The value of an expression that must yield exactly one series.
    async fn scalar(&self, expr: &str) -> Option<f64> {
        match self.values(expr).await.as_slice() {
            [value] => Some(*value),
            _ => None,
        }
    }
}

/// A Prometheus configuration scraping idemgate's admin listener every
/// second and loading the bundled alert rules.
fn prometheus_config(target: SocketAddr) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - "{}"
scrape_configs:
  - job_name: idemgate
    static_configs:
      - targets: ["{target}"]
"#,
        repo_path("config/prometheus/alerts.yml").display()
    )
}

fn run_promtool(args: &[&str]) -> std::process::Output {
    let output = Command::new("promtool")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "this test needs `promtool` on PATH (Debian/Ubuntu: apt-get install prometheus): {e}"
            )
        });
    assert!(
        output.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

// ---------------------------------------------------------------------------
// PromQL expressions of the dashboard and the rules
// ---------------------------------------------------------------------------

/// Every `targets[].expr` of every panel (rows included), with Grafana's
/// variables replaced by values Prometheus can evaluate.
fn dashboard_expressions() -> Vec<(String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("?").to_owned();
            assert!(
                panel["description"].as_str().is_some_and(|d| !d.is_empty()),
                "panel {title:?} has no description"
            );
            for target in panel["targets"].as_array().into_iter().flatten() {
                assert_eq!(
                    target["datasource"]["uid"], "${datasource}",
                    "panel {title:?}: targets use the datasource variable"
                );
                let expr = target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("panel {title:?}: target without expr"));
                let expr = expr
                    .replace("$__rate_interval", "1m")
                    .replace("${route}", ".*")
                    .replace("$route", ".*");
                assert!(!expr.contains('$'), "unsubstituted variable in {expr}");
                out.push((title.clone(), expr));
            }
            if panel["type"] != "row" {
                assert_eq!(
                    panel["datasource"]["uid"], "${datasource}",
                    "panel {title:?} uses the datasource variable"
                );
            }
            if let Some(children) = panel["panels"].as_array() {
                walk(children, out);
            }
        }
    }
    let path = repo_path("config/grafana/idemgate.json");
    let text = std::fs::read_to_string(&path).expect("read the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    walk(
        dashboard["panels"].as_array().expect("dashboard panels"),
        &mut out,
    );
    out
}

/// Splits an alert expression `<lhs> <cmp> <number>` at its final top-level
/// comparison and returns the left-hand side. Panics when the rule does not
/// follow that shape (see the header of alerts.yml).
fn threshold_lhs(expr: &str) -> String {
    let bytes = expr.as_bytes();
    let (mut depth, mut quote, mut i) = (0i32, None::<u8>, 0);
    let mut last_cmp = None;
    let mut word = String::new();
    while i < bytes.len() {
        let c = bytes[i];
        if let Some(q) = quote {
            if c == b'\\' {
                i += 1;
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        if depth == 0 && (c.is_ascii_alphanumeric() || c == b'_' || c == b':') {
            word.push(c as char);
            i += 1;
            continue;
        }
        assert!(
            !matches!(word.as_str(), "and" | "or" | "unless"),
            "alert expression {expr:?} combines conditions with `{word}`; \
             keep alerts as `<value> <cmp> <number>`"
        );
        word.clear();
        match c {
            b'"' | b'\'' | b'`' => quote = Some(c),
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'=' | b'!' | b'>' | b'<' if depth == 0 => {
                let two = bytes.get(i + 1) == Some(&b'=');
                if c != b'=' && c != b'!' || two {
                    last_cmp = Some((i, if two { 2 } else { 1 }));
                }
                if two {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let (at, len) = last_cmp.unwrap_or_else(|| panic!("no top-level comparison in {expr:?}"));
    let rhs = expr[at + len..].trim();
    assert!(
        parse_float(rhs).is_some(),
        "alert expression {expr:?} must end in `<cmp> <number>`, ends in {rhs:?}"
    );
    expr[..at].trim().to_owned()
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
#[ignore = "needs promtool"]
fn promtool_accepts_the_alert_rules() {
    let rules = repo_path("config/prometheus/alerts.yml");
    let output = run_promtool(&["check", "rules", rules.to_str().expect("utf-8 path")]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("SUCCESS"), "{text}");

    // The shipped example configuration (loads alerts.yml next to it) and
    // the configuration the Prometheus test below generates.
    run_promtool(&[
        "check",
        "config",
        repo_path("config/prometheus/prometheus.yml")
            .to_str()
            .expect("utf-8 path"),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let generated = dir.path().join("prometheus.yml");
    std::fs::write(
        &generated,
        prometheus_config(SocketAddr::from(([127, 0, 0, 1], 9))),
    )
    .expect("write config");
    run_promtool(&["check", "config", generated.to_str().expect("utf-8 path")]);
}

#[test]
#[ignore = "needs promtool"]
fn promtool_unit_tests_fire_the_upstream_and_eviction_alerts() {
    let tests = repo_path("config/prometheus/alerts_test.yml");
    let text = std::fs::read_to_string(&tests).expect("alerts_test.yml");
    for alert in [
        "IdemgateUpstreamDown",
        "IdemgateStoreEvictionRisk",
        "IdemgateStoreEvictedKeys",
    ] {
        assert!(
            text.contains(&format!("alertname: {alert}")),
            "alerts_test.yml has no case for {alert}"
        );
    }
    let output = run_promtool(&["test", "rules", tests.to_str().expect("utf-8 path")]);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("SUCCESS"), "{printed}");
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to `-`,
/// punctuation other than `-` and `_` dropped.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_section_in_the_readme() {
    const BASE: &str = "https://github.com/idemgate/idemgate#";
    let readme = std::fs::read_to_string(repo_path("README.md")).expect("README.md");
    let anchors: BTreeSet<String> = readme
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| heading_anchor(heading.trim_start_matches('#')))
        .collect();
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_path("config/prometheus/alerts.yml")).expect("alerts.yml"),
    )
    .expect("alerts.yml is YAML");
    let mut alerts = 0;
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let url = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has no runbook_url"));
            let anchor = url
                .strip_prefix(BASE)
                .unwrap_or_else(|| panic!("{name}: {url} does not start with {BASE}"));
            assert!(
                anchors.contains(anchor),
                "{name}: README.md has no heading for #{anchor}"
            );
        }
    }
    assert!(alerts >= 9, "{alerts} alerts");
    assert_eq!(
        heading_anchor(" Store may evict keys"),
        "store-may-evict-keys"
    );
}

#[test]
fn exposition_parser_and_threshold_split() {
    let sample =
        parse_sample(r#"m_total{a="x\"y",b="c\\d\ne",le="+Inf"} 12.5 1700000000000"#).unwrap();
    assert_eq!(sample.name, "m_total");
    assert_eq!(sample.labels["a"], "x\"y");
    assert_eq!(sample.labels["b"], "c\\d\ne");
    assert_eq!(sample.value, 12.5);
    assert_eq!(parse_sample("up 1").unwrap().labels.len(), 0);
    assert!(parse_sample("m{a=\"x} 1").is_err());
    assert!(parse_sample("m{a=\"1\",a=\"2\"} 1").is_err());
    assert!(parse_sample("m{} NaN").unwrap().value.is_nan());

    assert_eq!(threshold_lhs("up{job=\"x\"} == 0"), "up{job=\"x\"}");
    assert_eq!(
        threshold_lhs("sum(rate(a{r=~\"x|y\",s!=\">\"}[5m])) / sum(b) > 0.5"),
        "sum(rate(a{r=~\"x|y\",s!=\">\"}[5m])) / sum(b)"
    );
    assert_eq!(
        threshold_lhs("histogram_quantile(0.99, x) >= 1e-3"),
        "histogram_quantile(0.99, x)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_text_has_exact_counter_values() {
    let mut redis = RedisServer::start();
    // The body decides what the upstream does, so the script is
    // deterministic whatever the arrival order.
    let upstream = Upstream::scripted(|_, body| {
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
    .await;
    let base = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "on_in_flight = \"conflict\"",
    );
    let text = base
        .replace("[limits]\n", "[limits]\nmax_body_bytes = 1024\n")
        .replace("timeout = \"5s\"", "timeout = \"1s\"");
    assert!(text.contains("max_body_bytes = 1024") && text.contains("timeout = \"1s\""));
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let mut tally = Tally::default();

    // Before any traffic: every counter series of every route exists at 0.
    let idle = scrape(gate.admin).await;
    for route in ["pay", "_unmatched"] {
        for outcome in [
            "forwarded",
            "replayed",
            "rejected",
            "passthrough",
            "unprotected",
            "shadow_duplicate",
        ] {
            assert_eq!(
                idle.value(
                    "idemgate_requests_total",
                    &[("route", route), ("outcome", outcome)]
                ),
                Some(0.0),
                "{route}/{outcome} pre-registered"
            );
        }
    }

    // N = 6 first deliveries: four signed with the current secret, two with
    // the previous one.
    for i in 0..6 {
        let (secret, index) = if i < 4 {
            (SECRET, 0)
        } else {
            (PREVIOUS_SECRET, 1)
        };
        let body = payment(&format!("p-{i}"));
        let answer = post(&url, &signed_now(secret, &body), &body).await;
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
        let answer = post(&url, &signed_now(secret, &body), &body).await;
        tally.check(
            &format!("replay {id}"),
            &answer,
            &Expect::new(200, "replayed").secret(index),
        );
    }

    // Authenticity (stage 3): counted, no secret matched.
    let body = payment("forged-1");
    let answer = post(&url, &signed_now("wrong-secret", &body), &body).await;
    tally.check(
        "wrong secret",
        &answer,
        &Expect::new(401, "rejected").reason("signature_invalid"),
    );
    let mut garbage = signed(&body);
    garbage[0].1 = "zz-not-hex".into();
    let answer = post(&url, &garbage, &body).await;
    tally.check(
        "undecodable signature",
        &answer,
        &Expect::new(401, "rejected").reason("signature_invalid"),
    );
    let answer = post(&url, &without(signed(&body), "x-signature"), &body).await;
    tally.check(
        "no signature",
        &answer,
        &Expect::new(401, "rejected").reason("signature_missing"),
    );
    let answer = post(&url, &without(signed(&body), "x-timestamp"), &body).await;
    tally.check(
        "no timestamp",
        &answer,
        &Expect::new(401, "rejected").reason("timestamp_missing"),
    );
    for (what, at) in [("stale", now_secs() - 3600), ("future", now_secs() + 3600)] {
        let body = payment(&format!("{what}-1"));
        let answer = post(&url, &signed_with(SECRET, at, &body), &body).await;
        tally.check(
            what,
            &answer,
            &Expect::new(401, "rejected").reason("timestamp_out_of_window"),
        );
    }

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
        let answer = post(&url, &signed(&body), &body).await;
        tally.check(
            what,
            &answer,
            &Expect::new(400, "rejected").reason(reason).secret(0),
        );
    }
    // Same key, different request.
    let body = r#"{"id":"p-0","amount":"99.00","status":"PAID"}"#;
    let answer = post(&url, &signed(body), body).await;
    tally.check(
        "reused key",
        &answer,
        &Expect::new(422, "rejected")
            .reason("fingerprint_mismatch")
            .secret(0),
    );
    // Stage 2, before verification.
    let body = payment(&"x".repeat(2000));
    let answer = post(&url, &signed(&body), &body).await;
    tally.check(
        "too large",
        &answer,
        &Expect::new(413, "rejected").reason("body_too_large"),
    );
    // No route: forwarded untouched.
    let answer = post(&gate.url("/other"), &[], "hello").await;
    tally.check(
        "unmatched",
        &answer,
        &Expect::new(200, "passthrough").route("_unmatched"),
    );
    // Upstream answers 500: a forwarded first attempt, released.
    let body = payment("fail-1");
    let answer = post(&url, &signed(&body), &body).await;
    tally.check(
        "upstream 500",
        &answer,
        &Expect::new(500, "forwarded").secret(0),
    );

    // A duplicate while the first delivery is in flight (on_in_flight =
    // "conflict"): 409 in_flight.
    let body = payment("slow-1");
    let calls = upstream.calls();
    let first = tokio::spawn({
        let (url, body) = (url.clone(), body.clone());
        async move { post(&url, &signed(&body), &body).await }
    });
    poll(
        "the slow delivery to reach the upstream",
        Duration::from_secs(5),
        Duration::from_millis(10),
        async || (upstream.calls() > calls).then_some(()),
    )
    .await;
    let answer = post(&url, &signed(&body), &body).await;
    tally.check(
        "duplicate in flight",
        &answer,
        &Expect::new(409, "rejected").reason("in_flight").secret(0),
    );
    let answer = first.await.expect("first delivery task");
    tally.check(
        "slow first delivery",
        &answer,
        &Expect::new(200, "forwarded").secret(0),
    );

    // Upstream slower than upstream.timeout: 504, counted as forwarded with
    // reason upstream_timeout, recorded as unknown; the retry gets 409.
    let body = payment("hang-1");
    let answer = post(&url, &signed(&body), &body).await;
    tally.check(
        "upstream timeout",
        &answer,
        &Expect::new(504, "forwarded")
            .reason("upstream_timeout")
            .secret(0),
    );
    let answer = post(&url, &signed(&body), &body).await;
    tally.check(
        "retry of unknown",
        &answer,
        &Expect::new(409, "rejected")
            .reason("outcome_unknown")
            .secret(0),
    );

    // Store gone: 503 store_unavailable and one failed claim.
    redis.stop();
    let body = payment("nostore-1");
    let answer = post(&url, &signed(&body), &body).await;
    tally.check(
        "store down",
        &answer,
        &Expect::new(503, "rejected")
            .reason("store_unavailable")
            .secret(0),
    );
    assert!(
        answer.header("retry-after").is_some(),
        "503 has Retry-After"
    );

    let metrics = scrape(gate.admin).await;
    println!("tally: {tally:?}");

    // idemgate_requests_total: every (route, outcome) exactly.
    let routes = ["pay", "_unmatched"];
    let outcomes = [
        "forwarded",
        "replayed",
        "rejected",
        "passthrough",
        "unprotected",
        "shadow_duplicate",
    ];
    let mut expected = BTreeMap::new();
    for route in routes {
        for outcome in outcomes {
            expected.insert(
                labels_of(&[("route", route), ("outcome", outcome)]),
                tally.outcome(route, outcome) as f64,
            );
        }
    }
    metrics.assert_series("idemgate_requests_total", &expected);
    let (n, m) = (
        tally.outcome("pay", "forwarded"),
        tally.outcome("pay", "replayed"),
    );
    assert_eq!((n, m), (9, 5), "script: 6 + 3 first deliveries, 5 replays");
    assert_eq!(tally.outcome("pay", "rejected"), 14);

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

    // Store: one failed claim while Redis was down, nothing else failed.
    let mut expected = BTreeMap::new();
    for op in ["claim", "complete", "release", "renew", "lookup", "purge"] {
        let count = if op == "claim" { 1.0 } else { 0.0 };
        expected.insert(labels_of(&[("op", op)]), count);
    }
    metrics.assert_series("idemgate_store_errors_total", &expected);
    // Claims: every verified, identified delivery (9 + 5 + 422 + 409 ×2 + 503).
    // Completes: 6 + slow + unknown. Release: the 500.
    for (op, count) in [("claim", 18.0), ("complete", 8.0), ("release", 1.0)] {
        assert_eq!(
            metrics.value("idemgate_store_duration_seconds_count", &[("op", op)]),
            Some(count),
            "store op {op}"
        );
    }

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

    // Build info.
    let build: Vec<_> = metrics.series("idemgate_build_info");
    assert_eq!(build.len(), 1, "{build:?}");
    assert_eq!(
        build[0].labels,
        labels_of(&[("version", env!("CARGO_PKG_VERSION"))])
    );
    assert_eq!(build[0].value, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus"]
async fn real_prometheus_evaluates_every_dashboard_and_alert_expression() {
    const FIRST: usize = 20;
    const REPLAYS_EACH: usize = 3;
    const FORGED: usize = 3;
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
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
    let scrapes = r#"count_over_time(up{job="idemgate"}[1h])"#;
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

    // The route variable's query.
    let doc = prometheus
        .api("/api/v1/label/route/values?match[]=idemgate_requests_total")
        .await;
    let routes: Vec<&str> = doc["data"]
        .as_array()
        .expect("label values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        routes.contains(&"pay") && routes.contains(&"_unmatched"),
        "{routes:?}"
    );

    // Every dashboard expression yields at least one finite value.
    let dashboard = dashboard_expressions();
    assert!(
        dashboard.len() >= 12,
        "{} dashboard expressions",
        dashboard.len()
    );
    for (panel, expr) in &dashboard {
        let values = prometheus.values(expr).await;
        println!("dashboard {panel:?}: {expr} => {values:?}");
        assert!(
            values.iter().any(|v| v.is_finite()),
            "panel {panel:?}: {expr} gave no finite value: {values:?}"
        );
    }

    // SPEC §7 hit rate, verbatim, and the dashboard's own hit-rate panels.
    let spec = r#"sum(rate(idemgate_requests_total{outcome="replayed"}[5m])) / sum(rate(idemgate_requests_total{outcome=~"forwarded|replayed"}[5m]))"#;
    let measured = prometheus.scalar(spec).await.expect("one hit-rate value");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_redis() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let readyz = format!("http://{}/readyz", gate.admin);
    let status = async || http_get(&readyz).await.map(|(s, _)| s).ok();

    poll(
        "/readyz 200",
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || (status().await? == 200).then_some(()),
    )
    .await;

    redis.stop();
    let stopped = Instant::now();
    poll(
        "/readyz 503 after Redis stopped",
        Duration::from_secs(2),
        Duration::from_millis(100),
        async || (status().await? == 503).then_some(()),
    )
    .await;
    let down_after = stopped.elapsed();
    println!("/readyz answered 503 {down_after:?} after Redis was killed");
    assert!(down_after <= Duration::from_secs(2), "{down_after:?}");
    let body = payment("ready-1");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(answer.reason().as_deref(), Some("store_unavailable"));

    redis.restart();
    let restarted = Instant::now();
    poll(
        "/readyz 200 after Redis restarted",
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || (status().await? == 200).then_some(()),
    )
    .await;
    let up_after = restarted.elapsed();
    println!("/readyz answered 200 {up_after:?} after Redis was back");
    let answer = post(&gate.url("/notify"), &signed(&body), &body).await;
    assert_eq!(
        (answer.status, answer.replayed()),
        (200, Some("false")),
        "protection resumes with the store"
    );
}
