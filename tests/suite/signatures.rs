//! Rejected deliveries never touch the store or the upstream
//! (docs/contract.md §1 stage 3), checked with Redis's own
//! `INFO commandstats`.

use crate::support::*;

#[tokio::test]
async fn forged_unsigned_stale_and_future_deliveries_are_401_without_store_access() {
    let (redis, upstream, gate) = redis_gate("").await;
    let url = gate.url("/notify");
    let body = payment("p-401");
    let now = now_secs();
    let store = redis.watch_data();
    // The gate reads its own clock a moment later, so the stale and future
    // cases sit well outside the 300 s window (a second's tick between the
    // two clocks made a 301 s-ahead delivery 300 s ahead: it flaked).
    // The exact edges are checked with a fixed clock in `presets.rs`.

    let cases: Vec<(&str, Headers, &str)> = vec![
        (
            "forged",
            signed_with("attacker", now, &body),
            "signature_invalid",
        ),
        (
            "unsigned",
            vec![("x-timestamp".into(), now.to_string())],
            "signature_missing",
        ),
        (
            "stale",
            signed_with(SECRET, now - 330, &body),
            "timestamp_out_of_window",
        ),
        (
            "future",
            signed_with(SECRET, now + 330, &body),
            "timestamp_out_of_window",
        ),
        (
            "no timestamp",
            signed(&body)
                .into_iter()
                .filter(|(k, _)| k != "x-timestamp")
                .collect(),
            "timestamp_missing",
        ),
        (
            "tampered body",
            signed(&body.replace("10.00", "10.01")),
            "signature_invalid",
        ),
    ];
    for (name, headers, reason) in cases {
        let answer = send("POST", &url, &headers, body.clone()).await;
        assert_eq!(answer.status, 401, "{name}");
        assert_eq!(answer.reason().as_deref(), Some(reason), "{name}");
        assert_eq!(
            answer.header("content-type"),
            Some("application/problem+json")
        );
        let text = String::from_utf8_lossy(&answer.body);
        assert!(
            !text.contains(SECRET) && !text.contains("p-401"),
            "{name}: leaks {text}"
        );
    }
    assert_eq!(
        store.commands(),
        Vec::<String>::new(),
        "no store command for a rejected delivery"
    );
    assert_eq!(upstream.calls(), 0);

    // The rotated (previous) secret still verifies, and that does reach the store.
    let rotated = send(
        "POST",
        &url,
        &signed_with("previous-secret-0123456789", now, &body),
        body.clone(),
    )
    .await;
    assert_eq!(rotated.status, 200);
    assert!(store.count() > 0);
    gate.stop().await;
}
