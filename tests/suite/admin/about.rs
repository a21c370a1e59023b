//! `/admin/config`, `/admin/info`, and the `Allow` header of every 405
//! on the admin listener (RFC 9110 §15.5.6).

use std::time::{SystemTime, UNIX_EPOCH};

use idemgate::config::Config;

use super::{TOKEN, admin, with_admin};
use crate::support::*;

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_405_names_the_methods_the_path_serves_and_an_unknown_path_is_404() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    for (method, path, allow) in [
        ("PUT", "/admin/records/pay/x", "GET, DELETE"),
        ("POST", "/admin/records/pay?hash=00", "GET, DELETE"),
        ("DELETE", "/admin/hot-keys", "GET"),
        ("POST", "/admin/config", "GET"),
        ("DELETE", "/admin/info", "GET"),
    ] {
        let answer = admin(&gate, method, path, Some(TOKEN)).await;
        assert_eq!(answer.status, 405, "{method} {path}: {answer:?}");
        assert_eq!(answer.reason().as_deref(), Some("method_not_allowed"));
        assert_eq!(answer.header("allow"), Some(allow), "{method} {path}");
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        let answer = admin(&gate, "POST", path, None).await;
        assert_eq!(answer.status, 405, "{path}");
        assert_eq!(answer.header("allow"), Some("GET"), "{path}");
    }
    // No resource, no method set: a wrong path is 404 whatever the method.
    for method in ["GET", "PUT"] {
        let answer = admin(&gate, method, "/admin/nowhere", Some(TOKEN)).await;
        assert_eq!(answer.status, 404, "{method}");
        assert_eq!(answer.header("allow"), None, "{method}");
    }
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_config_is_what_check_config_prints_without_a_secret() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = with_admin(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let gate = Gate::start(&text).await;

    assert_eq!(admin(&gate, "GET", "/admin/config", None).await.status, 401);
    let answer = admin(&gate, "GET", "/admin/config", Some(TOKEN)).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/toml")),
        "{answer:?}"
    );
    let body = String::from_utf8(answer.body.to_vec()).expect("UTF-8");
    let printed = Config::parse(&text).expect("valid").to_toml();
    assert_eq!(body, printed);
    for secret in [TOKEN, SECRET] {
        assert!(!body.contains(secret), "a secret in /admin/config:\n{body}");
    }
    assert!(body.contains("literal:<redacted>"), "{body}");
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_info_names_the_build_the_start_the_routes_and_follows_the_store() {
    let before = unix_ms();
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = with_admin(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let gate = Gate::start(&text).await;
    let after = unix_ms();

    assert_eq!(admin(&gate, "GET", "/admin/info", None).await.status, 401);
    let info = |answer: Answer| -> serde_json::Value {
        assert_eq!(answer.status, 200, "{answer:?}");
        serde_json::from_slice(&answer.body).expect("JSON")
    };
    let doc = info(admin(&gate, "GET", "/admin/info", Some(TOKEN)).await);
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"), "{doc}");
    assert!(doc["revision"].as_str().is_some_and(|r| !r.is_empty()));
    let started = doc["started_at_unix_ms"].as_u64().expect("a number") as u128;
    assert!((before..=after).contains(&started), "{doc}");
    assert!(doc["uptime_ms"].is_u64(), "{doc}");
    assert_eq!(doc["store"]["kind"], "redis", "{doc}");
    assert_eq!(doc["store"]["ready"], true, "{doc}");
    assert!(doc["store"]["problem"].is_null(), "{doc}");
    let routes = doc["routes"].as_array().expect("routes");
    assert_eq!(routes.len(), 1, "{doc}");
    assert_eq!(routes[0]["name"], "pay");
    assert_eq!(routes[0]["path_prefix"], "/notify");
    assert_eq!(routes[0]["inbox"], false);

    // Readiness is the store's real state, the same verdict as /readyz.
    redis.stop();
    let down = info(admin(&gate, "GET", "/admin/info", Some(TOKEN)).await);
    assert_eq!(down["store"]["ready"], false, "{down}");
    assert!(down["store"]["problem"].is_string(), "{down}");
    assert_eq!(admin(&gate, "GET", "/readyz", None).await.status, 503);
    gate.stop().await;
}
