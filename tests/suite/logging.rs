//! Logs: one structured line per request, with the same fields in text and
//! JSON, empty ones left out, and never a secret, a signature or body
//! content (checked on the real binary's debug-level output).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

/// One request line's fields, as strings, whatever the format.
type Fields = BTreeMap<String, String>;

/// The body marker a test delivery carries; never logged.
const MARKER: &str = "body-marker-7f3a";

/// What one run logged, and the secrets it must not contain.
struct Run {
    output: String,
    requests: Vec<Fields>,
    leaks: Vec<(&'static str, String)>,
}

/// The `request` lines of a text log: `k=v` tokens after the message, the
/// quotes of string values removed.
fn text_requests(output: &str) -> Vec<Fields> {
    output
        .lines()
        .filter_map(|line| line.split_once(" idemgate::pipeline: request "))
        .map(|(_, fields)| {
            fields
                .split(' ')
                .filter_map(|token| token.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect()
        })
        .collect()
}

/// The `request` lines of a JSON log; numbers must be JSON numbers.
fn json_requests(output: &str) -> Vec<Fields> {
    output
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["message"] == "request")
        .map(|line| {
            let object = line.as_object().unwrap();
            for number in ["status", "latency_us", "upstream_status", "secret_index"] {
                if let Some(value) = object.get(number) {
                    assert!(value.is_u64(), "{number} is not an integer: {line}");
                }
            }
            object
                .iter()
                .map(|(k, v)| {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    (k.clone(), text)
                })
                .collect()
        })
        .collect()
}

/// Runs the same traffic against the real binary logging in `format`.
async fn run(format: &str) -> Run {
    let redis = RedisServer::start();
    // "fail-" bodies get a 500 (the claim is released), "hang-" ones
    // outlast the 1 s upstream timeout (the outcome turns unknown).
    let upstream = Upstream::scripted(|_, body| {
        let body = String::from_utf8_lossy(body);
        if body.contains("fail-") {
            Reply::status(500)
        } else if body.contains("hang-") {
            Reply::slow(Duration::from_millis(1500))
        } else {
            Reply::ok()
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let text = config_text(&redis_store(&redis), &upstream.url(), "")
        .replace("timeout = \"5s\"", "timeout = \"1s\"");
    let mut gate = GateProcess::launch(&text, &[("IDEMGATE_LOG_FORMAT", format)], Some(&log));

    let body = format!(r#"{{"id":"p-log","note":"{MARKER}","amount":"10.00"}}"#);
    let url = gate.url("/notify");
    let signed_headers = signed(&body);
    let signature = signed_headers[0].1.clone();
    let forged = signed_with("forger-secret-9c1e", now_secs(), &body);
    let forged_signature = forged[0].1.clone();
    // 0: first delivery, through a non-canonical spelling of the path and a
    // query: the line shows the canonical path only.
    let spelled = gate.url("/notify;v=1?token=query-secret-5d2b");
    assert_eq!(
        send("POST", &spelled, &signed_headers, body.clone())
            .await
            .status,
        200
    );
    // 1: replay; 2: forged; 3: fingerprint mismatch.
    assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));
    assert_eq!(send("POST", &url, &forged, body.clone()).await.status, 401);
    let other = body.replace("10.00", "11.00");
    assert_eq!(deliver(&url, &other).await.status, 422);
    // 4: the upstream answers 500: the claim is released.
    assert_eq!(deliver(&url, r#"{"id":"fail-1"}"#).await.status, 500);
    // 5: the upstream times out: the outcome is held as unknown.
    assert_eq!(deliver(&url, r#"{"id":"hang-1"}"#).await.status, 504);
    // 6: unmatched, passed through; its query is not logged either.
    let other_url = gate.url("/elsewhere?token=query-secret-5d2b");
    assert_eq!(
        send("GET", &other_url, &[], String::new()).await.status,
        200
    );
    assert!(gate.terminate().success());

    let output = std::fs::read_to_string(&log).unwrap();
    let requests = match format {
        "json" => json_requests(&output),
        _ => text_requests(&output),
    };
    let leaks = vec![
        ("the route secret", SECRET.to_owned()),
        (
            "the rotated secret",
            "previous-secret-0123456789".to_owned(),
        ),
        ("the forger's secret", "forger-secret-9c1e".to_owned()),
        ("body content", MARKER.to_owned()),
        ("a key value from the body", "p-log".to_owned()),
        ("a query", "query-secret-5d2b".to_owned()),
        ("a valid signature", signature),
        ("a forged signature", forged_signature),
    ];
    Run {
        output,
        requests,
        leaks,
    }
}

/// The assertions both formats must pass.
fn check(run: &Run) {
    let Run {
        output,
        requests,
        leaks,
    } = run;
    for (what, needle) in leaks {
        assert!(
            !output.contains(needle.as_str()),
            "the log contains {what}:\n{output}"
        );
    }
    assert_eq!(requests.len(), 7, "one line per request:\n{output}");
    let field = |i: usize, name: &str| requests[i].get(name).map(String::as_str);
    let column =
        |name: &str| -> Vec<Option<&str>> { (0..requests.len()).map(|i| field(i, name)).collect() };
    assert_eq!(
        column("outcome"),
        [
            "forwarded",
            "replayed",
            "rejected",
            "rejected",
            "forwarded",
            "forwarded",
            "passthrough"
        ]
        .map(Some)
    );
    assert_eq!(
        column("settled"),
        [
            "stored",
            "not_claimed",
            "not_claimed",
            "not_claimed",
            "released",
            "unknown",
            "not_claimed"
        ]
        .map(Some)
    );
    assert_eq!(
        column("upstream_status"),
        [
            Some("200"),
            None,
            None,
            None,
            Some("500"),
            None,
            Some("200")
        ],
        "only a forwarded request the upstream answered has one"
    );
    assert_eq!(
        column("reason"),
        [
            None,
            None,
            Some("signature_invalid"),
            Some("fingerprint_mismatch"),
            None,
            Some("upstream_timeout"),
            None
        ],
        "no empty reason"
    );
    assert_eq!(
        column("path"),
        [
            "/notify",
            "/notify",
            "/notify",
            "/notify",
            "/notify",
            "/notify",
            "/elsewhere"
        ]
        .map(Some),
        "canonical path, never the query"
    );
    assert_eq!(
        column("method"),
        ["POST", "POST", "POST", "POST", "POST", "POST", "GET"].map(Some)
    );
    assert_eq!(
        column("route"),
        ["pay", "pay", "pay", "pay", "pay", "pay", "_unmatched"].map(Some)
    );
    for line in requests {
        let peer: SocketAddr = line["peer"].parse().expect("peer is a socket address");
        assert!(peer.ip().is_loopback(), "{line:?}");
        assert!(line["status"].parse::<u16>().is_ok(), "{line:?}");
        let latency: u64 = line["latency_us"].parse().expect("integer microseconds");
        assert!(latency > 0 && latency < 30_000_000, "{line:?}");
        assert!(!line.contains_key("latency_ms"), "{line:?}");
        assert!(
            line.values().all(|value| !value.is_empty()),
            "no empty field: {line:?}"
        );
    }
    assert!(
        field(5, "latency_us").unwrap().parse::<u64>().unwrap() >= 1_000_000,
        "the timed-out delivery waited out the 1 s upstream timeout"
    );
    // Rejected before the claim: no key; an unmatched request has none either.
    assert_eq!(field(2, "key"), None);
    assert_eq!(field(6, "key"), None);
    assert_eq!(field(6, "secret_index"), None);
    assert_eq!(
        field(0, "key"),
        field(1, "key"),
        "the key hash ties a replay to its first delivery"
    );
    assert_eq!(field(0, "key").map(str::len), Some(64));
    assert_eq!(field(0, "secret_index"), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_every_field_and_never_leak_secrets_or_bodies() {
    check(&run("json").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_lines_carry_every_field_and_never_leak_secrets_or_bodies() {
    check(&run("text").await);
}

/// A path carrying raw line and paragraph separators and C1 controls: the
/// JSON line escapes them as the text line does, so no viewer splits the
/// line or lets them act on a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_escape_separators_and_c1_controls_from_paths() {
    const RAW: [char; 4] = ['\u{2028}', '\u{2029}', '\u{85}', '\u{9b}'];
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let store = embedded_store(&dir.path().join("store.redb"));
    let text = config_text(&store, &upstream.url(), "");
    let mut gate = GateProcess::launch(&text, &[("IDEMGATE_LOG_FORMAT", "json")], Some(&log));
    let target = "/elsewhere/a\u{2028}b\u{2029}c\u{85}d\u{9b}e";
    let answer = send_raw(gate.addr, "GET", target.as_bytes(), &[], "").await;
    assert_ne!(answer.status, 0, "the request was answered");
    assert!(gate.terminate().success());

    let output = std::fs::read_to_string(&log).unwrap();
    for c in RAW {
        assert!(!output.contains(c), "{c:?} left raw in:\n{output}");
    }
    let lines: Vec<serde_json::Value> = output
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|line: &serde_json::Value| line["message"] == "request")
        .collect();
    assert_eq!(lines.len(), 1, "{output}");
    assert_eq!(lines[0]["path"], target, "escaped, the same value");
    assert!(
        output.contains(r"a\u2028b\u2029c\u0085d\u009be"),
        "{output}"
    );
}
