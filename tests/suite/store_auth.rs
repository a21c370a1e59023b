//! `[store] username` and `password`: Redis credentials given as secret
//! sources apart from the URL, against a real `redis-server` that requires
//! them (`requirepass`, and an ACL user).

use std::time::Duration;

use crate::support::*;

/// A Redis that requires `default-pw` for the default user and knows the
/// ACL user `gate` with password `gate-pw` (set after start-up, so the
/// harness' PING-based start check needs no password).
fn protected_redis() -> RedisServer {
    let redis = RedisServer::start();
    let out = redis.cli(&[
        "ACL", "SETUSER", "gate", "on", ">gate-pw", "~*", "&*", "+@all",
    ]);
    assert_eq!(out.trim(), "OK", "ACL SETUSER: {out}");
    redis.config_set("requirepass", "default-pw");
    redis
}

fn gate_config(redis: &RedisServer, upstream: &Upstream, credentials: &str) -> String {
    config_text(
        &format!("{}\n{credentials}", redis_store(redis)),
        &upstream.url(),
        "",
    )
}

async fn readyz_becomes(admin: std::net::SocketAddr, status: u16) {
    poll(
        &format!("/readyz {status}"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || (admin_get(admin, "/readyz").await.0 == status).then_some(()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_the_environment() {
    let redis = protected_redis();
    let upstream = Upstream::start().await;
    let text = gate_config(
        &redis,
        &upstream,
        "password = \"env:IDEMGATE_TEST_REDIS_PW\"",
    );

    let gate = GateProcess::launch(&text, &[("IDEMGATE_TEST_REDIS_PW", "default-pw")], None);
    readyz_becomes(gate.admin, 200).await;
    let body = payment("p-auth-1");
    let first = deliver(&gate.url("/notify"), &body).await;
    let replay = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((first.status, replay.status), (200, 200));
    assert_eq!(upstream.calls(), 1, "the replay came from Redis");
    drop(gate);

    let wrong = GateProcess::launch(&text, &[("IDEMGATE_TEST_REDIS_PW", "wrong-pw")], None);
    readyz_becomes(wrong.admin, 503).await;
    let refused = deliver(&wrong.url("/notify"), &payment("p-auth-2")).await;
    assert_eq!(
        (refused.status, refused.reason().as_deref()),
        (503, Some("store_unavailable")),
        "on_unavailable = reject: {refused:?}"
    );
    assert_eq!(upstream.calls(), 1, "nothing forwarded unprotected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_a_file_password() {
    let redis = protected_redis();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("redis-password");
    std::fs::write(&password, "gate-pw\n").unwrap();
    let text = gate_config(
        &redis,
        &upstream,
        &format!(
            "username = \"literal:gate\"\npassword = \"file:{}\"",
            password.display()
        ),
    );
    let gate = GateProcess::start(&text);
    readyz_becomes(gate.admin, 200).await;
    let answer = deliver(&gate.url("/notify"), &payment("p-acl-1")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let clients = redis.cli(&["--user", "gate", "--pass", "gate-pw", "CLIENT", "LIST"]);
    assert!(clients.contains("user=gate"), "{clients}");
}
