//! The admin listener: health, readiness and the record API
//! (docs/contract.md §6).

use std::time::Duration;

use crate::support::*;

mod about;
mod audit;
#[cfg(feature = "system-tests")]
mod console;
#[cfg(feature = "system-tests")]
mod console_walk;
mod entities;
mod listener;
#[cfg(feature = "system-tests")]
mod listing;
#[cfg(feature = "system-tests")]
mod listing_churn;
mod openapi;

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

/// A config whose upstream times out after 200 ms (the first call, from
/// `Upstream::slow_first`, takes 2 s), so that delivery's outcome turns
/// unknown and is held for 10 minutes: a record for an operator to resolve.
fn times_out_to_unknown(redis: &RedisServer, upstream: &Upstream) -> String {
    config_text(
        &redis_store(redis),
        &upstream.url(),
        "unknown_hold = \"10m\"",
    )
    .replace("timeout = \"5s\"", "timeout = \"200ms\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_api_needs_the_token_and_resolves_unknown_outcomes() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let text = times_out_to_unknown(&redis, &upstream);
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
    // The logged key hash addresses the same record, through ?hash=.
    let by_hash = admin(
        &gate,
        "GET",
        &format!("/admin/records/pay?hash={key_hash}"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(by_hash.status, 200);
    let by_hash: serde_json::Value = serde_json::from_slice(&by_hash.body).unwrap();
    assert_eq!(
        (&by_hash["key_hash"], &by_hash["fingerprint"]),
        (&view["key_hash"], &view["fingerprint"])
    );

    // A purge says which state it saw: without it, the answer names the
    // state now and what a purge does to it; another state is refused.
    let unsaid = admin(&gate, "DELETE", path, Some(TOKEN)).await;
    let detail = String::from_utf8_lossy(&unsaid.body).into_owned();
    assert_eq!(unsaid.status, 400, "{detail}");
    assert!(detail.contains("the record is unknown now"), "{detail}");
    let stale = format!("{path}?expect_state=in_flight");
    let refused = admin(&gate, "DELETE", &stale, Some(TOKEN)).await;
    assert_eq!(
        (refused.status, refused.reason().as_deref()),
        (409, Some("record_changed")),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    // The operator checked the backend and purges: the next delivery is a first delivery.
    let purge = format!("{path}?expect_state=unknown");
    assert_eq!(
        admin(&gate, "DELETE", &purge, Some(TOKEN)).await.status,
        204
    );
    assert_eq!(
        admin(&gate, "DELETE", &purge, Some(TOKEN)).await.status,
        404
    );
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

/// A key value that is itself 64 hex digits (a SHA-256 event id) is a
/// value in the path and in `?key=`, and its hash is only `?hash=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_hex_key_value_is_found_by_value_and_by_hash() {
    let (_redis, upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    let event_id = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let answer = deliver(&gate.url("/notify"), &payment(event_id)).await;
    assert_eq!(answer.status, 200);

    let view = |answer: &Answer| -> serde_json::Value {
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        serde_json::from_slice(&answer.body).unwrap()
    };
    let by_path = view(
        &admin(
            &gate,
            "GET",
            &format!("/admin/records/pay/{event_id}"),
            Some(TOKEN),
        )
        .await,
    );
    let by_value = view(
        &admin(
            &gate,
            "GET",
            &format!("/admin/records/pay?key={event_id}"),
            Some(TOKEN),
        )
        .await,
    );
    let key_hash = by_path["key_hash"].as_str().unwrap().to_owned();
    assert_ne!(key_hash, event_id);
    assert_eq!(by_value["key_hash"], by_path["key_hash"]);
    assert_eq!(by_path["state"], "completed");
    let by_hash = view(
        &admin(
            &gate,
            "GET",
            &format!("/admin/records/pay?hash={key_hash}"),
            Some(TOKEN),
        )
        .await,
    );
    assert_eq!(by_hash["fingerprint"], by_path["fingerprint"]);
    // The value taken as a hash names no record (and is not this one).
    assert_eq!(
        admin(
            &gate,
            "GET",
            &format!("/admin/records/pay?hash={event_id}"),
            Some(TOKEN)
        )
        .await
        .status,
        404
    );

    // One form at a time, and a hash must be one.
    for bad in [
        format!("/admin/records/pay/{event_id}?hash={key_hash}"),
        format!("/admin/records/pay?key={event_id}&hash={key_hash}"),
        "/admin/records/pay?hash=abc".to_owned(),
        "/admin/records/pay?id=x".to_owned(),
        "/admin/records/pay".to_owned(),
    ] {
        let answer = admin(&gate, "GET", &bad, Some(TOKEN)).await;
        assert_eq!(
            answer.status,
            400,
            "{bad}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }

    // A completed record's purge must say it saw "completed": without it,
    // the answer says the handler already did this delivery.
    let unsaid = admin(
        &gate,
        "DELETE",
        &format!("/admin/records/pay?key={event_id}"),
        Some(TOKEN),
    )
    .await;
    let detail = String::from_utf8_lossy(&unsaid.body).into_owned();
    assert_eq!(unsaid.status, 400, "{detail}");
    assert!(
        detail.contains("completed now") && detail.contains("runs again"),
        "{detail}"
    );
    // Purged by value, the next delivery is a first delivery again.
    assert_eq!(
        admin(
            &gate,
            "DELETE",
            &format!("/admin/records/pay?key={event_id}&expect_state=completed"),
            Some(TOKEN)
        )
        .await
        .status,
        204
    );
    assert_eq!(
        admin(
            &gate,
            "GET",
            &format!("/admin/records/pay?hash={key_hash}"),
            Some(TOKEN)
        )
        .await
        .status,
        404
    );
    let again = deliver(&gate.url("/notify"), &payment(event_id)).await;
    assert_eq!((again.status, again.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

/// The `Bearer` scheme is case-insensitive (RFC 9110 §11.1); the token is
/// not.
#[tokio::test]
async fn bearer_scheme_is_case_insensitive_and_the_token_exact() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    let path = format!("http://{}/admin/records/pay/nothing-here", gate.admin);
    let status = |authorization: Option<String>| {
        let path = path.clone();
        async move {
            let headers: Headers = authorization
                .map(|value| vec![("authorization".to_owned(), value)])
                .unwrap_or_default();
            send("GET", &path, &headers, "").await.status
        }
    };
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        assert_eq!(
            status(Some(format!("{scheme} {TOKEN}"))).await,
            404,
            "{scheme}: authorized, and no such record"
        );
    }
    for denied in [
        None,
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        Some("Bearer wrong".to_owned()),
        Some(format!("Basic {TOKEN}")),
        Some(TOKEN.to_owned()),
        Some("Bearer ".to_owned()),
    ] {
        assert_eq!(status(denied.clone()).await, 401, "{denied:?}");
    }
    gate.stop().await;
}

#[tokio::test]
async fn record_api_is_off_without_a_token() {
    let (_redis, _upstream, gate) = redis_gate("").await;
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

/// The shell blocks of the docs/runbooks.md section `## {heading}`, in
/// order, with their list indentation removed.
fn runbook_shell_blocks(heading: &str) -> Vec<String> {
    let runbooks =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/runbooks.md"))
            .expect("docs/runbooks.md");
    let start = runbooks
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/runbooks.md has no section {heading:?}"));
    let section = &runbooks[start + 1..];
    let section = &section[..section[4..]
        .find("\n#")
        .map_or(section.len(), |end| end + 4)];
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in section.lines() {
        let trimmed = line.trim_start();
        match (&mut current, trimmed) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(lines), "```") => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), _) => lines.push(trimmed),
            (None, _) => {}
        }
    }
    blocks
}

/// Runs `script` with `sh`, the admin token in the environment as the
/// runbook expects; returns stdout, panicking on failure.
/// Runs a runbook block in `sh` as an operator's shell on the instance
/// would: `idemgate` on `PATH`, the token in `IDEMGATE_ADMIN_TOKEN`, and
/// `IDEMGATE_ADMIN_ADDR` naming this test's admin listener.
fn run_runbook(script: &str, admin: std::net::SocketAddr) -> String {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_idemgate"));
    let path = format!(
        "{}:{}",
        binary.parent().expect("the binary's folder").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = std::process::Command::new("sh")
        .args(["-c", script])
        .env("PATH", path)
        .env("IDEMGATE_ADMIN_TOKEN", TOKEN)
        .env("IDEMGATE_ADMIN_ADDR", admin.to_string())
        .output()
        .expect("sh is installed");
    assert!(
        output.status.success(),
        "runbook step failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The unknown-outcome runbook (docs/runbooks.md), run as written against the real
/// binary and its operator CLI: only the log file and the admin address
/// are this test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcome_runbook_works_copy_paste() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let text = times_out_to_unknown(&redis, &upstream);
    let text = format!("{text}\n[admin]\ntoken = \"env:IDEMGATE_ADMIN_TOKEN\"\n");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(&text, &[("IDEMGATE_ADMIN_TOKEN", TOKEN)], Some(&log));

    let body = payment("runbook-1");
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 504);
    let warn_line = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .find(|line| line.contains("WARN") && line.contains("outcome unknown"))
            .map(str::to_owned)
    };
    assert!(
        eventually(Duration::from_secs(5), || warn_line().is_some()).await,
        "no outcome-unknown WARN line:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let line = warn_line().unwrap();
    let field = |name: &str| {
        let start = line.find(&format!(" {name}=\"")).expect(name) + name.len() + 3;
        line[start..].split('"').next().unwrap().to_owned()
    };
    let (route, key) = (field("route"), field("key"));
    assert_eq!(route, "pay", "{line}");
    assert!(
        key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()),
        "{line}"
    );
    let blocked = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(blocked.reason().as_deref(), Some("outcome_unknown"));

    let blocks: Vec<String> = runbook_shell_blocks("Outcome unknown")
        .into_iter()
        .map(|block| block.replace("/var/log/idemgate.log", &log.display().to_string()))
        .collect();
    assert_eq!(blocks.len(), 2, "inspect and purge: {blocks:?}");

    // Step 1: find the key in the log and inspect the record.
    let inspected = run_runbook(&blocks[0], gate.admin);
    let view: serde_json::Value = serde_json::from_str(&inspected).expect("record JSON");
    assert_eq!(view["state"], "unknown", "{inspected}");
    assert_eq!(
        (view["route"].as_str(), view["key_hash"].as_str()),
        (Some("pay"), Some(key.as_str()))
    );

    // Step 3: purge (in the same shell, so with step 1's variables).
    run_runbook(&format!("{}\n{}", blocks[0], blocks[1]), gate.admin);
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2, "the purged key was forwarded again");
}

/// Asserts `answer` is a problem document of `reason` typed under `base`,
/// with `status` in the status line and the body.
fn assert_problem(answer: &Answer, status: u16, reason: &str, base: &str) {
    let body = String::from_utf8_lossy(&answer.body);
    assert_eq!(answer.status, status, "{body}");
    assert_eq!(
        answer.header("content-type"),
        Some("application/problem+json"),
        "{body}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(doc["reason"], reason, "{body}");
    assert_eq!(doc["type"], format!("{base}{reason}"), "{body}");
    assert_eq!(doc["status"], status, "{body}");
    assert!(
        doc["title"].is_string() && doc["detail"].is_string(),
        "{body}"
    );
}

/// Admin refusals are problem documents, and every problem document (the
/// proxy's too) is typed under the configured `problem_type_base`; the
/// probes stay plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_errors_and_rejections_are_problems_under_the_configured_base() {
    const BASE: &str = "https://docs.example.com/problems/";
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let gate = Gate::start(&format!(
        "problem_type_base = \"{BASE}\"\n{}",
        with_admin(&text)
    ))
    .await;

    let denied = admin(&gate, "GET", "/admin/records/pay/x", Some("wrong")).await;
    assert_problem(&denied, 401, "unauthorized", BASE);
    assert!(denied.header("www-authenticate").is_some());
    let missing = admin(&gate, "GET", "/admin/records/pay/x", Some(TOKEN)).await;
    assert_problem(&missing, 404, "record_not_found", BASE);
    let no_route = admin(&gate, "GET", "/admin/records/nope/x", Some(TOKEN)).await;
    assert_problem(&no_route, 404, "unknown_route", BASE);
    let nowhere = admin(&gate, "GET", "/admin/nowhere", None).await;
    assert_problem(&nowhere, 404, "not_found", BASE);
    let wrong_method = admin(&gate, "PUT", "/admin/records/pay/x", Some(TOKEN)).await;
    assert_problem(&wrong_method, 405, "method_not_allowed", BASE);
    let unnamed = admin(&gate, "GET", "/admin/records/pay", Some(TOKEN)).await;
    assert_problem(&unnamed, 400, "bad_request", BASE);

    // Probes and scrapes read plain text, errors included.
    for (method, path, status) in [
        ("GET", "/healthz", 200),
        ("POST", "/healthz", 405),
        ("GET", "/readyz", 200),
    ] {
        let answer = admin(&gate, method, path, None).await;
        assert_eq!(answer.status, status, "{method} {path}");
        let content_type = answer.header("content-type").unwrap_or_default();
        assert!(
            content_type.starts_with("text/plain"),
            "{path}: {content_type}"
        );
    }

    let body = payment("p-1");
    let unsigned = send("POST", &gate.url("/notify"), &Vec::new(), body).await;
    assert_problem(&unsigned, 401, "signature_missing", BASE);
    gate.stop().await;
}

/// Without `problem_type_base` the types are URNs under
/// `urn:idemgate:problem:`, on both listeners.
#[tokio::test]
async fn problem_types_default_to_a_urn() {
    const BASE: &str = "urn:idemgate:problem:";
    let (_redis, _upstream, gate) = redis_gate("").await;
    let disabled = admin(&gate, "GET", "/admin/records/pay/x", Some("t")).await;
    assert_problem(&disabled, 404, "admin_api_disabled", BASE);
    let body = payment("p-1");
    let unsigned = send("POST", &gate.url("/notify"), &Vec::new(), body).await;
    assert_problem(&unsigned, 401, "signature_missing", BASE);
    gate.stop().await;
}
