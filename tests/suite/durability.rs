//! `[store] durability` against real servers: Debian's Redis 7.0 (no
//! `WAITAOF`) and Valkey 9.1 (`WAITAOF`), each started by the test.
//!
//! The default level is `fsync`: a server without an AOF fsynced per write
//! is not ready and refuses first deliveries (nothing reaches the handler)
//! until its settings are fixed at runtime; `everysec` is enough where
//! `WAITAOF` exists, and every write is then followed by one; `memory` is
//! taken only when written, and is then named in the log, `/admin/info`
//! and a gauge; `replicated` refuses a claim no replica acknowledged.

use std::time::Duration;

use crate::support::*;

const ADMIN_TOKEN: &str = "durability-admin-token";

fn config(redis: &RedisServer, upstream: &Upstream, store_extra: &str) -> String {
    let store = format!(
        "kind = \"redis\"\nurl = \"{}\"\ncommand_timeout = \"{TEST_STORE_TIMEOUT}\"\n{store_extra}",
        redis.url()
    );
    format!(
        "{}\n[admin]\ntoken = \"literal:{ADMIN_TOKEN}\"\n",
        config_text(&store, &upstream.url(), "")
    )
}

/// `/admin/info`'s `store.durability`.
async fn durability_info(gate: &Gate) -> serde_json::Value {
    let headers = [("authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}"))];
    let url = format!("http://{}/admin/info", gate.admin);
    let answer = send("GET", &url, &headers, "").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let info: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    info["store"]["durability"].clone()
}

fn is_valkey(binary: &str) -> bool {
    binary.contains("valkey")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_is_the_default_and_a_server_that_can_not_give_it_takes_no_delivery() {
    for binary in server_binaries() {
        let upstream = Upstream::start().await;
        let redis = RedisServer::start_binary(&binary, false);
        let gate = Gate::start(&config(&redis, &upstream, "")).await;

        let why = readyz_becomes(gate.admin, 503).await;
        assert!(
            why.contains("can not give durability fsync") && why.contains("appendonly no"),
            "{binary}: {why}"
        );
        let refused = deliver(&gate.url("/notify"), r#"{"id":"d-1"}"#).await;
        assert_eq!(refused.status, 503, "{binary}: {refused:?}");
        assert_eq!(refused.reason().as_deref(), Some("store_unavailable"));
        assert_eq!(upstream.calls(), 0, "{binary}: nothing reaches the handler");
        let info = durability_info(&gate).await;
        assert_eq!(info["level"], "fsync", "{info}");
        assert_eq!(info["met"], false, "{info}");

        // An AOF fsynced once a second: enough only with WAITAOF.
        redis.config_set("appendonly", "yes");
        redis.config_set("appendfsync", "everysec");
        if is_valkey(&binary) {
            readyz_becomes(gate.admin, 200).await;
        } else {
            let why = readyz_becomes(gate.admin, 503).await;
            assert!(why.contains("appendfsync everysec on redis 7.0"), "{why}");
            assert!(why.contains("without WAITAOF"), "{why}");
            redis.config_set("appendfsync", "always");
            readyz_becomes(gate.admin, 200).await;
        }
        let info = durability_info(&gate).await;
        assert_eq!(info["met"], true, "{binary}: {info}");
        let server = if is_valkey(&binary) {
            "valkey 9."
        } else {
            "redis 7.0"
        };
        assert!(
            info["servers"][0].as_str().unwrap().contains(server),
            "{info}"
        );

        let before = redis.command_counts().get("waitaof").copied().unwrap_or(0);
        let first = deliver(&gate.url("/notify"), r#"{"id":"d-2"}"#).await;
        assert_eq!(first.status, 200, "{binary}: {first:?}");
        let again = deliver(&gate.url("/notify"), r#"{"id":"d-2"}"#).await;
        assert_eq!(again.replayed(), Some("true"), "{binary}");
        assert_eq!(upstream.calls(), 1, "{binary}");
        let waited = redis.command_counts().get("waitaof").copied().unwrap_or(0) - before;
        if is_valkey(&binary) {
            // The claim and the stored answer, each confirmed by the server.
            assert!(waited >= 2, "{binary}: {waited} WAITAOF");
        } else {
            assert_eq!(waited, 0, "Redis 7.0 has no WAITAOF");
        }
        gate.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_taken_only_when_written_and_is_then_named() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let text = config(&redis, &upstream, "durability = \"memory\"");
    let gate = GateProcess::launch(&text, &[], Some(&log));
    readyz_becomes(gate.admin, 200).await;
    assert_eq!(
        metric(gate.admin, "idemgate_store_durability{level=\"memory\"}").await,
        Some(1.0)
    );
    assert_eq!(
        metric(gate.admin, "idemgate_store_durability_met").await,
        Some(1.0)
    );
    log_with_line(&log, "WARN naming durability memory", |line| {
        line.contains("WARN") && line.contains("store durability is memory")
    })
    .await;
    let answer = deliver(&format!("http://{}/notify", gate.addr), r#"{"id":"m-1"}"#).await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_follow_a_server_that_loses_its_aof_at_runtime() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start_persistent();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(&config(&redis, &upstream, ""), &[], Some(&log));
    readyz_becomes(gate.admin, 200).await;
    assert_eq!(
        metric(gate.admin, "idemgate_store_durability{level=\"fsync\"}").await,
        Some(1.0)
    );
    assert_eq!(
        metric(gate.admin, "idemgate_store_durability_met").await,
        Some(1.0)
    );
    redis.config_set("appendonly", "no");
    readyz_becomes(gate.admin, 503).await;
    assert_eq!(
        metric(gate.admin, "idemgate_store_durability_met").await,
        Some(0.0)
    );
    log_with_line(&log, "ERROR naming the node and the setting", |line| {
        line.contains("ERROR")
            && line.contains(&format!("127.0.0.1:{}", redis.port))
            && line.contains("set appendonly yes")
    })
    .await;
    let url = format!("http://{}/notify", gate.addr);
    let refused = deliver(&url, r#"{"id":"g-1"}"#).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(upstream.calls(), 0);
}

/// A primary with one replica in sync (both with an AOF fsynced per
/// write), and a gate on it at `replicated` with that `WAIT` timeout.
async fn replicated_gate(upstream: &Upstream, timeout: &str) -> (RedisServer, RedisServer, Gate) {
    let primary = RedisServer::start_persistent();
    let replica = RedisServer::start_persistent();
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port.to_string()]);
    assert!(
        eventually(Duration::from_secs(10), || has_online_replica(primary.port)).await,
        "replica attached"
    );
    let extra = format!(
        "durability = \"replicated\"\nmin_replicas_ack = 1\nreplica_ack_timeout = \"{timeout}\""
    );
    let gate = Gate::start(&config(&primary, upstream, &extra)).await;
    readyz_becomes(gate.admin, 200).await;
    (primary, replica, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_refuses_a_claim_no_replica_acknowledged() {
    let upstream = Upstream::start().await;
    let (_primary, replica, gate) = replicated_gate(&upstream, "200ms").await;
    // With the replica answering, the delivery is served. (A WAIT slowed
    // past 200 ms by a loaded machine is a 503 that forwarded nothing;
    // the sender sends again, as a real one does.)
    let first = deliver_until_served(
        &gate.url("/notify"),
        r#"{"id":"r-1"}"#,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(first.status, 200, "{first:?}");

    // The replica stops answering (SIGSTOP): it is still listed online,
    // but WAIT hears nothing, so no claim can be confirmed.
    let pid = replica.pid().expect("replica runs");
    signal(pid, "STOP");
    let refused = deliver(&gate.url("/notify"), r#"{"id":"r-2"}"#).await;
    signal(pid, "CONT");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(
        upstream.calls(),
        1,
        "the unconfirmed claim was not forwarded"
    );
    let served = deliver_until_served(
        &gate.url("/notify"),
        r#"{"id":"r-2"}"#,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_no_replica_acknowledged_is_stored_again_until_one_does() {
    let upstream = Upstream::slow_first(Duration::from_millis(600)).await;
    let (primary, replica, gate) = replicated_gate(&upstream, "100ms").await;
    let body = r#"{"id":"s-1"}"#;
    let first = deliver_while_upstream_works(gate.url("/notify"), body, &upstream, 1).await;
    // The claim was confirmed; the replica stops before the answer comes.
    let pid = replica.pid().expect("replica runs");
    signal(pid, "STOP");
    let answer = first.await.unwrap();
    assert_eq!(
        answer.status, 200,
        "the answer in hand is given: {answer:?}"
    );
    let waits = || primary.command_counts().get("wait").copied().unwrap_or(0);
    let at_answer = waits();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let retried = waits() - at_answer;
    assert!(
        retried >= 2,
        "the unconfirmed answer is stored again and waited for: {retried} WAIT"
    );
    signal(pid, "CONT");
    // Once a replica acknowledges, the retries stop.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = waits();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(waits(), settled, "no more retries once confirmed");
    let copy = deliver(&gate.url("/notify"), body).await;
    assert_eq!(copy.replayed(), Some("true"), "{copy:?}");
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_lost_its_data_is_noticed_and_taken_out_of_service() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start_persistent();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(&config(&redis, &upstream, ""), &[], Some(&log));
    readyz_becomes(gate.admin, 200).await;
    let url = format!("http://{}/notify", gate.addr);
    assert_eq!(deliver(&url, r#"{"id":"l-1"}"#).await.status, 200);
    const LOST: &str = "idemgate_store_data_lost_total";
    assert_eq!(metric(gate.admin, LOST).await, Some(0.0));

    // The data goes, the inbox's books with it: only the marker tells.
    redis.cli(&["FLUSHALL"]);
    let why = readyz_becomes(gate.admin, 503).await;
    assert!(why.contains("the store lost data"), "{why}");
    assert_eq!(metric(gate.admin, LOST).await, Some(1.0));
    log_with_line(&log, "ERROR about the loss", |line| {
        line.contains("ERROR") && line.contains("the store lost data")
    })
    .await;
    // Still out of service on the next look: a restart acknowledges it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(admin_get(gate.admin, "/readyz").await.0, 503);
    assert_eq!(metric(gate.admin, LOST).await, Some(1.0), "counted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_durability_memory_a_restart_that_lost_everything_is_reported_not_refused() {
    let upstream = Upstream::start().await;
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let text = config(&redis, &upstream, "durability = \"memory\"");
    let gate = GateProcess::launch(&text, &[], Some(&log));
    readyz_becomes(gate.admin, 200).await;
    redis.restart();
    log_with_line(&log, "ERROR about the loss", |line| {
        line.contains("ERROR") && line.contains("the store lost data")
    })
    .await;
    assert_eq!(
        metric(gate.admin, "idemgate_store_data_lost_total").await,
        Some(1.0)
    );
    readyz_becomes(gate.admin, 200).await;
}

/// An entity route's decided notice (a late failure after the success,
/// acknowledged and never forwarded) rests on a write like a claim does:
/// on a store that can not give the level, it is refused, not acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_decision_is_acknowledged_only_when_durable() {
    let upstream = Upstream::start().await;
    let redis = RedisServer::start_persistent();
    let text = format!(
        "{}\n[admin]\ntoken = \"literal:{ADMIN_TOKEN}\"\n",
        config_text(&redis_store(&redis), &upstream.url(), ENTITY_MACHINE)
    );
    let gate = Gate::start(&text).await;
    readyz_becomes(gate.admin, 200).await;
    let url = gate.url("/notify");
    let first = deliver(&url, &entity_notice("n1", "o1", "success")).await;
    assert_eq!(first.status, 200, "{first:?}");
    let late = deliver(&url, &entity_notice("n2", "o1", "failed")).await;
    assert_eq!(
        late.status, 200,
        "acknowledged on a durable store: {late:?}"
    );
    redis.config_set("appendonly", "no");
    readyz_becomes(gate.admin, 503).await;
    let refused = deliver(&url, &entity_notice("n3", "o1", "failed")).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.reason().as_deref(), Some("store_unavailable"));
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

/// `kill -SIGNAL pid`.
fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid}");
}
