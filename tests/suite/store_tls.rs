//! `rediss://` against a real `redis-server` speaking only TLS, with a CA
//! and certificates made at test time (`support::TestPki`): the server is
//! verified (its CA from `[store] tls_ca_file`, and its name), a refusal
//! says why at start-up and in `/readyz`, and a Redis that requires client
//! certificates gets the one `tls_cert_file`/`tls_key_file` name.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// The test configuration on `redis` with `tls` lines added to `[store]`.
fn gate_config(redis: &RedisServer, upstream: &Upstream, tls: &str) -> String {
    config_text(
        &format!("{}\n{tls}", redis_store(redis)),
        &upstream.url(),
        "",
    )
}

fn ca_line(ca: &Path) -> String {
    format!("tls_ca_file = \"{}\"", ca.display())
}

fn client_lines(pki: &TestPki) -> String {
    format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        pki.client.cert.display(),
        pki.client.key.display()
    )
}

/// A delivery and its replay through `gate`: executed once, replayed from
/// the TLS Redis, whose keyspace now holds the record.
async fn claims_and_replays(
    gate: &GateProcess,
    upstream: &Upstream,
    redis: &RedisServer,
    id: &str,
) {
    let body = payment(id);
    let first = deliver(&gate.url("/notify"), &body).await;
    let replay = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((first.status, replay.status), (200, 200), "{replay:?}");
    assert_eq!(upstream.calls(), 1, "the replay came from Redis");
    assert!(
        !redis.keys("*").is_empty(),
        "the record is in the TLS Redis"
    );
}

/// A gate that could not connect: not ready, with `cause` in `/readyz`
/// and in its start-up log, and no delivery forwarded unprotected.
async fn refused(gate: &GateProcess, log: &Path, upstream: &Upstream, cause: &str) {
    readyz_says(gate.admin, 503, cause).await;
    let answer = deliver(&gate.url("/notify"), &payment("p-tls-refused")).await;
    assert_eq!(
        (answer.status, answer.reason().as_deref()),
        (503, Some("store_unavailable")),
        "{answer:?}"
    );
    assert_eq!(upstream.calls(), 0, "nothing forwarded unprotected");
    // Lines are written in batches: wait for the one that says why.
    let says_why = |logged: &str| logged.contains("redis refused the connection") && logged.contains(cause);
    let said = eventually(Duration::from_secs(5), || says_why(&log_text(log))).await;
    assert!(said, "the start-up log says why: {}", log_text(log));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_replays_over_tls_with_a_custom_ca() {
    let pki = TestPki::generate();
    let redis = RedisServer::start_tls(pki.redis(&pki.server, false));
    let upstream = Upstream::start().await;
    let gate = GateProcess::start(&gate_config(&redis, &upstream, &ca_line(&pki.ca)));
    readyz_becomes(gate.admin, 200).await;
    claims_and_replays(&gate, &upstream, &redis, "p-tls-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_from_another_ca_is_refused() {
    let pki = TestPki::generate();
    let redis = RedisServer::start_tls(pki.redis(&pki.server, false));
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gate.log");
    let text = gate_config(&redis, &upstream, &ca_line(&pki.other_ca));
    let gate = GateProcess::launch(&text, &[], Some(&log));
    refused(&gate, &log, &upstream, "UnknownIssuer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_another_name_is_refused() {
    let pki = TestPki::generate();
    let redis = RedisServer::start_tls(pki.redis(&pki.wrong_name, false));
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gate.log");
    let text = gate_config(&redis, &upstream, &ca_line(&pki.ca));
    let gate = GateProcess::launch(&text, &[], Some(&log));
    refused(&gate, &log, &upstream, "NotValidForName").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_port_behind_a_tls_url_is_named() {
    let pki = TestPki::generate();
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gate.log");
    let store = format!(
        "kind = \"redis\"\nurl = \"rediss://127.0.0.1:{}/0\"\ncommand_timeout = \"250ms\"\n\
         durability = \"memory\"\n{}",
        redis.port,
        ca_line(&pki.ca)
    );
    let gate = GateProcess::launch(&config_text(&store, &upstream.url(), ""), &[], Some(&log));
    refused(&gate, &log, &upstream, "answers plain Redis, not TLS").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = TestPki::generate();
    let redis = RedisServer::start_tls(pki.redis(&pki.server, true));
    let upstream = Upstream::start().await;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gate.log");
    let without = gate_config(&redis, &upstream, &ca_line(&pki.ca));
    let gate = GateProcess::launch(&without, &[], Some(&log));
    refused(&gate, &log, &upstream, "CertificateRequired").await;
    drop(gate);

    let with = format!("{}\n{}", ca_line(&pki.ca), client_lines(&pki));
    let gate = GateProcess::start(&gate_config(&redis, &upstream, &with));
    readyz_becomes(gate.admin, 200).await;
    claims_and_replays(&gate, &upstream, &redis, "p-mtls-1").await;
    let clients = redis.cli(&["CLIENT", "LIST"]);
    assert!(
        clients.lines().count() > 1,
        "idemgate is connected: {clients}"
    );
}

#[test]
fn check_config_names_bad_tls_files() {
    let pki = TestPki::generate();
    let config = |tls: &str| {
        format!(
            "[store]\nkind = \"redis\"\nurl = \"rediss://127.0.0.1:6380/0\"\n{tls}\n\
             [upstream]\nurl = \"http://127.0.0.1:3000\"\n\
             [[route]]\nname = \"pay\"\npath_prefix = \"/notify\"\n\
             [route.signature]\nscheme = \"none\"\n\
             [route.idempotency]\nkey = [\"json:/id\"]\n"
        )
    };
    let good = format!("{}\n{}", ca_line(&pki.ca), client_lines(&pki));
    let (code, printed) = check_config(&config(&good));
    assert_eq!(code, Some(0), "{printed}");
    assert!(
        printed.contains(&format!("tls_ca_file = \"{}\"", pki.ca.display())),
        "the effective configuration shows the CA file: {printed}"
    );

    // The CA file holds a private key, not a certificate.
    let (code, printed) = check_config(&config(&ca_line(&pki.client.key)));
    assert_eq!(code, Some(2), "{printed}");
    let expected = format!(
        "store.tls_ca_file: {} holds no PEM certificate",
        pki.client.key.display()
    );
    assert!(printed.contains(&expected), "{printed}");

    // The server's key with the client's certificate.
    let mismatched = format!(
        "{}\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        ca_line(&pki.ca),
        pki.client.cert.display(),
        pki.server.key.display()
    );
    let (code, printed) = check_config(&config(&mismatched));
    assert_eq!(code, Some(2), "{printed}");
    assert!(
        printed.contains("store.tls_cert_file:")
            && printed.contains("are not a usable certificate and key"),
        "{printed}"
    );
}
