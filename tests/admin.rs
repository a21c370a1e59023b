//! The admin listener: health, readiness and the record API (SPEC §6).

mod common;

use std::time::Duration;

use common::*;

const TOKEN: &str = "admin-token-for-tests";

fn with_admin(text: &str) -> String {
    format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n")
}

async fn admin(gate: &Gate, method: &str, path: &str, token: Option<&str>) -> Answer {
    let headers: Headers = token
        .map(|t| vec![("authorization".to_owned(), format!("Bearer {t}"))])
        .unwrap_or_default();
    send(
        method,
        &format!("http://{}{path}", gate.admin),
        &headers,
        "",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_api_needs_the_token_and_resolves_unknown_outcomes() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "unknown_hold = \"10m\"",
    )
    .replace("timeout = \"5s\"", "timeout = \"200ms\"");
    let gate = Gate::start(&with_admin(&text)).await;
    assert_eq!(admin(&gate, "GET", "/healthz", None).await.status, 200);
    assert_eq!(admin(&gate, "GET", "/readyz", None).await.status, 200);

    let path = "/admin/records/pay/p-admin";
    assert_eq!(admin(&gate, "GET", path, None).await.status, 401);
    assert_eq!(admin(&gate, "GET", path, Some("wrong")).await.status, 401);
    assert_eq!(
        admin(&gate, "DELETE", path, Some("wrong")).await.status,
        401
    );
    assert_eq!(
        admin(&gate, "GET", path, Some(TOKEN)).await.status,
        404,
        "no record yet"
    );

    // The upstream times out: the outcome is unknown and blocks the key.
    let body = payment("p-admin");
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 504);
    assert_eq!(
        deliver(&gate.url("/notify"), &body)
            .await
            .reason()
            .as_deref(),
        Some("outcome_unknown")
    );

    let inspect = admin(&gate, "GET", path, Some(TOKEN)).await;
    assert_eq!(inspect.status, 200);
    let view: serde_json::Value = serde_json::from_slice(&inspect.body).unwrap();
    assert_eq!(view["state"], "unknown");
    let ttl = view["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 590_000 && ttl <= 600_000, "ttl {ttl}");
    assert_eq!(view["fingerprint"].as_str().unwrap().len(), 64);
    let key_hash = view["key_hash"].as_str().unwrap().to_owned();
    // The logged key hash addresses the same record.
    let by_hash = admin(
        &gate,
        "GET",
        &format!("/admin/records/pay/{key_hash}"),
        Some(TOKEN),
    )
    .await;
    let by_hash: serde_json::Value = serde_json::from_slice(&by_hash.body).unwrap();
    assert_eq!(
        (&by_hash["key_hash"], &by_hash["fingerprint"]),
        (&view["key_hash"], &view["fingerprint"])
    );

    // The operator checked the backend and purges: the next delivery is a first delivery.
    assert_eq!(admin(&gate, "DELETE", path, Some(TOKEN)).await.status, 204);
    assert_eq!(admin(&gate, "DELETE", path, Some(TOKEN)).await.status, 404);
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2);

    let completed = admin(&gate, "GET", path, Some(TOKEN)).await;
    let view: serde_json::Value = serde_json::from_slice(&completed.body).unwrap();
    assert_eq!(view["state"], "completed");
    assert_eq!(view["status"], 200);
    assert!(view["ttl_ms"].as_u64().unwrap() > 3_500_000, "retention 1h");
    assert_eq!(
        admin(&gate, "GET", "/admin/records/nope/x", Some(TOKEN))
            .await
            .status,
        404
    );
    gate.stop().await;
}

#[tokio::test]
async fn record_api_is_off_without_a_token() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    assert_eq!(
        admin(&gate, "GET", "/admin/records/pay/x", Some("anything"))
            .await
            .status,
        404
    );
    assert_eq!(
        admin(&gate, "DELETE", "/admin/records/pay/x", None)
            .await
            .status,
        404
    );
    gate.stop().await;
}

#[tokio::test]
async fn healthcheck_subcommand_probes_the_admin_listener() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let mut gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let probe = |path: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .arg("healthcheck")
            .arg("--config")
            .arg(path)
            .output()
            .expect("run healthcheck")
    };
    let healthy = probe(&gate.config_path);
    assert!(healthy.status.success(), "{healthy:?}");
    gate.kill();
    let down = probe(&gate.config_path);
    assert_eq!(down.status.code(), Some(1), "{down:?}");
    assert!(String::from_utf8_lossy(&down.stderr).contains("unhealthy"));
}

#[test]
fn version_names_the_build() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("idemgate {}", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
}
