//! The admin listener under abuse: liveness answers under a flood of idle
//! sockets, and only host names it knows are answered (DNS rebinding).

use std::time::{Duration, Instant};

use super::with_admin;
use crate::support::*;

/// `GET path` with `Host: host` on a fresh connection from 127.0.0.1:
/// the status, or 0 when no answer came within `within`.
async fn get_with_host(
    admin: std::net::SocketAddr,
    path: &str,
    host: &str,
    within: Duration,
) -> u16 {
    let headers = vec![("host".to_owned(), host.to_owned())];
    let url = format!("http://{admin}{path}");
    match tokio::time::timeout(within, send("GET", &url, &headers, "")).await {
        Ok(answer) => answer.status,
        Err(_) => 0,
    }
}

/// 1,100 idle sockets from one address (more than `max_connections`):
/// `/healthz` from that same address still answers 200 within a second,
/// and so does one from another address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_answers_under_a_flood_of_idle_sockets() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&with_admin(&config_text(&store, &upstream.url(), ""))).await;
    let mut idle = Vec::new();
    for _ in 0..1_100 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(gate.admin),
        )
        .await
        {
            Ok(Ok(stream)) => idle.push(stream),
            _ => break,
        }
    }
    assert!(idle.len() >= 1_000, "{} idle sockets opened", idle.len());
    let host = gate.admin.to_string();
    let started = Instant::now();
    let status = get_with_host(gate.admin, "/healthz", &host, Duration::from_secs(1)).await;
    assert_eq!(
        status,
        200,
        "after {:?} with {} idle sockets",
        started.elapsed(),
        idle.len()
    );
    drop(idle);
    gate.stop().await;
}

/// A page that points a name it controls at 127.0.0.1 (DNS rebinding)
/// sends that name as `Host`: `/metrics`, `/healthz` and the API refuse it
/// (421 `unknown_host`), while the listener's address, `localhost` and a
/// name of `[admin] allowed_hosts` are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_listeners_own_host_names_are_answered() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let text = with_admin(&config_text(&store, &upstream.url(), "")).replace(
        "[admin]\n",
        "[admin]\nallowed_hosts = [\"idemgate-admin.pay.svc\"]\n",
    );
    let gate = Gate::start(&text).await;
    let port = gate.admin.port();
    let second = Duration::from_secs(2);
    for path in ["/metrics", "/healthz", "/admin/info"] {
        let refused =
            get_with_host(gate.admin, path, &format!("rebound.example:{port}"), second).await;
        assert_eq!(refused, 421, "{path}");
    }
    let answer = send(
        "GET",
        &format!("http://{}/metrics", gate.admin),
        &[("host".to_owned(), "rebound.example".to_owned())],
        "",
    )
    .await;
    assert_eq!(answer.reason().as_deref(), Some("unknown_host"));
    for host in [
        gate.admin.to_string(),
        format!("localhost:{port}"),
        format!("idemgate-admin.pay.svc:{port}"),
    ] {
        assert_eq!(
            get_with_host(gate.admin, "/healthz", &host, second).await,
            200,
            "{host}"
        );
    }
    gate.stop().await;
}

/// A read-only named token looks (listings, records) but can not act: a
/// purge, an inbox drop and an entity correction each answer 403
/// `read_only_token` and change nothing; an `act` token purges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_looks_but_can_not_act() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let text = with_admin(&config_text(&store, &upstream.url(), ""))
        + "[[admin.tokens]]\nname = \"grafana\"\ntoken = \"literal:grafana-token-0001\"\n\
           [[admin.tokens]]\nname = \"oncall\"\ntoken = \"literal:oncall-token-00001\"\nscope = \"act\"\n";
    let gate = Gate::start(&text).await;
    assert_eq!(
        deliver(&gate.url("/notify"), &payment("p-ro")).await.status,
        200
    );
    let call = |method: &'static str, path: &'static str, token: &'static str| {
        let url = format!("http://{}{path}", gate.admin);
        async move {
            let headers = vec![("authorization".to_owned(), format!("Bearer {token}"))];
            send(method, &url, &headers, "").await
        }
    };
    let reader = "grafana-token-0001";
    assert_eq!(
        call("GET", "/admin/records/pay?key=p-ro", reader)
            .await
            .status,
        200
    );
    assert_eq!(
        call("GET", "/admin/records/pay?state=unknown", reader)
            .await
            .status,
        200
    );
    for (method, path) in [
        (
            "DELETE",
            "/admin/records/pay?key=p-ro&expect_state=completed",
        ),
        ("POST", "/admin/inbox/pay/drop?key=p-ro&expect_state=dead"),
        ("PUT", "/admin/entities/pay?id=o-1&state=paid"),
    ] {
        let refused = call(method, path, reader).await;
        assert_eq!(
            (refused.status, refused.reason().as_deref()),
            (403, Some("read_only_token")),
            "{method} {path}"
        );
    }
    let still = call("GET", "/admin/records/pay?key=p-ro", reader).await;
    assert_eq!(still.status, 200, "the purge did nothing");
    let purged = call(
        "DELETE",
        "/admin/records/pay?key=p-ro&expect_state=completed",
        "oncall-token-00001",
    )
    .await;
    assert_eq!(purged.status, 204, "{purged:?}");
    assert_eq!(
        call("GET", "/admin/records/pay?key=p-ro", reader)
            .await
            .status,
        404
    );
    assert_eq!(
        call("GET", "/admin/records/pay?key=p-ro", "nope-nope-nope")
            .await
            .status,
        401
    );
    gate.stop().await;
}

/// Every admin request is read in one order, whatever the path: a path no
/// endpoint serves is a 404 before any token is asked for; then a missing
/// or unknown token (401), a read-only token's action (403), a method the
/// path does not serve (405, even naming a route that does not exist),
/// and only then the route the path names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_is_read_in_one_order() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let text = with_admin(&config_text(&store, &upstream.url(), ""))
        + "[[admin.tokens]]\nname = \"grafana\"\ntoken = \"literal:grafana-token-0001\"\n";
    let gate = Gate::start(&text).await;
    let reader = "grafana-token-0001";
    let call = |method: &'static str, path: &'static str, token: Option<&'static str>| {
        let url = format!("http://{}{path}", gate.admin);
        async move {
            let headers = token
                .map(|t| vec![("authorization".to_owned(), format!("Bearer {t}"))])
                .unwrap_or_default();
            let answer = send(method, &url, &headers, "").await;
            (answer.status, answer.reason())
        }
    };
    let reason = |word: &str| Some(word.to_owned());
    for path in [
        "/admin/inbox/pay/",
        "/admin/inbox/pay/other",
        "/admin/records/",
        "/admin/entities/pay/more",
        "/admin/audit/1",
    ] {
        for token in [None, Some(super::TOKEN)] {
            assert_eq!(
                call("GET", path, token).await,
                (404, reason("not_found")),
                "GET {path} {token:?}"
            );
        }
    }
    for (method, path) in [
        ("PATCH", "/admin/records/pay/k1"),
        ("PATCH", "/admin/inbox/nowhere"),
        ("GET", "/admin/inbox/nowhere/retry"),
        ("POST", "/admin/entities/nowhere"),
        ("POST", "/admin/info"),
    ] {
        assert_eq!(
            call(method, path, None).await,
            (401, reason("unauthorized")),
            "{method} {path} without a token"
        );
        let by_reader = call(method, path, Some(reader)).await;
        let expected = if method == "GET" {
            (405, reason("method_not_allowed"))
        } else {
            (403, reason("read_only_token"))
        };
        assert_eq!(by_reader, expected, "{method} {path} by a reader");
        assert_eq!(
            call(method, path, Some(super::TOKEN)).await,
            (405, reason("method_not_allowed")),
            "{method} {path}: the method before the route"
        );
    }
    assert_eq!(
        call("GET", "/admin/inbox/nowhere", Some(reader)).await,
        (404, reason("unknown_route"))
    );
    gate.stop().await;
}
