//! Logs: one structured line per request, and never a secret, a signature
//! or body content (checked on the real binary's debug-level output).

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_structured_and_never_leak_secrets_or_bodies() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let mut gate = GateProcess::launch(&text, &[("IDEMGATE_LOG_FORMAT", "json")], Some(&log));

    let marker = "body-marker-7f3a";
    let body = format!(r#"{{"id":"p-log","note":"{marker}","amount":"10.00"}}"#);
    let url = gate.url("/notify");
    let signed_headers = signed(&body);
    let signature = signed_headers[0].1.clone();
    let forged = signed_with("forger-secret-9c1e", now_secs(), &body);
    let forged_signature = forged[0].1.clone();
    assert_eq!(
        send("POST", &url, &signed_headers, body.clone())
            .await
            .status,
        200
    );
    assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));
    assert_eq!(send("POST", &url, &forged, body.clone()).await.status, 401);
    let other = body.replace("10.00", "11.00");
    assert_eq!(deliver(&url, &other).await.status, 422);
    assert!(gate.terminate().success());

    let output = std::fs::read_to_string(&log).unwrap();
    for (what, needle) in [
        ("the route secret", SECRET),
        ("the rotated secret", "previous-secret"),
        ("the forger's secret", "forger-secret-9c1e"),
        ("body content", marker),
        ("a key value from the body", "p-log"),
        ("a valid signature", signature.as_str()),
        ("a forged signature", forged_signature.as_str()),
    ] {
        assert!(
            !output.contains(needle),
            "the log contains {what}:\n{output}"
        );
    }
    let requests: Vec<serde_json::Value> = output
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["message"] == "request")
        .collect();
    assert_eq!(requests.len(), 4, "one line per request:\n{output}");
    let outcomes: Vec<&str> = requests
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["forwarded", "replayed", "rejected", "rejected"]);
    assert_eq!(requests[2]["reason"], "signature_invalid");
    assert_eq!(requests[3]["reason"], "fingerprint_mismatch");
    for line in &requests {
        assert_eq!(line["route"], "pay");
        assert!(line["status"].as_u64().is_some() && line["latency_ms"].as_f64().is_some());
    }
    assert_eq!(
        requests[0]["key"], requests[1]["key"],
        "the key hash ties a replay to its first delivery"
    );
    assert_eq!(requests[0]["secret_index"], 0);
}
