//! Observability contract (docs/contract.md §6, §7) against real processes
//! on loopback: the `idemgate` binary, `redis-server`, a real upstream,
//! `promtool` and a real `prometheus` server. Every child is stopped by PID
//! when its guard drops, and every wait is bounded.
//!
//! * the alert rules pass `promtool check rules`, and the promtool unit
//!   tests of `config/prometheus/alerts_test.yml` fire the upstream-down,
//!   eviction, inbox, hit-rate (per namespace and job) and key-retry-loop
//!   alerts on synthetic series;
//! * every alert's `runbook_url` names a section of docs/runbooks.md and
//!   no host (its base is the external label `idemgate_repo`);
//! * the dashboard's first row links each stat to an alert's runbook;
//! * `/metrics` holds exactly the counts a scripted mix of deliveries must
//!   produce, read with a parser of the text exposition format;
//! * Prometheus scraping idemgate evaluates every expression of the bundled
//!   Grafana dashboard (its job/namespace/instance/route variables
//!   substituted) and alert rules to a value, the contract's hit rate to
//!   the ratio the traffic implies and the hit-rate stat to 0 without
//!   traffic; the shared inbox backlog gauges are aggregated with `max`,
//!   never `sum`;
//! * the PrometheusRule generated for the Prometheus Operator passes
//!   `promtool check rules` and the same unit tests as alerts.yml;
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
const PREVIOUS_SECRET: &str = "previous-secret-0123456789";

mod dashboard;
mod exact;
mod grafana;
mod readyz;
mod rules;

// ---------------------------------------------------------------------------
// Scripted traffic and what it must count
// ---------------------------------------------------------------------------

/// Expected counter values, filled in as the script runs.
#[derive(Debug, Default)]
struct Tally {
    /// (route, outcome) → requests.
    outcomes: BTreeMap<(&'static str, &'static str), u64>,
    /// (route, outcome, status class of the answer) → requests.
    classes: BTreeMap<(&'static str, &'static str, &'static str), u64>,
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
                "{reason} is a reason of docs/contract.md §3"
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
        *self
            .classes
            .entry((expect.route, expect.outcome, status_class(expect.status)))
            .or_default() += 1;
        if let Some(index) = expect.secret {
            *self.secrets.entry(index).or_default() += 1;
        }
    }

    fn class(&self, route: &str, outcome: &str, class: &str) -> u64 {
        self.classes
            .get(&(route, outcome, class))
            .copied()
            .unwrap_or_default()
    }

    fn outcome(&self, route: &str, outcome: &str) -> u64 {
        self.outcomes
            .get(&(route, outcome))
            .copied()
            .unwrap_or_default()
    }
}

/// The `status_class` label of an answer with `status`.
fn status_class(status: u16) -> &'static str {
    match status / 100 {
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        _ => "other",
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
            .scalar(r#"sum(idemgate_requests_total{route="pay",outcome="replayed"})"#)
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
