//! The replay cache and admin purges across a Cluster failover: whatever
//! an instance cached from a primary that died or froze, it must not keep
//! replaying once the promoted primary says otherwise, and a purge must
//! succeed as soon as the slot has a primary again.

use super::*;

const TOKEN: &str = "cache-failover-token";

/// How the primary under test is taken away.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// SIGKILL: its connections close, every client notices at once.
    Killed,
    /// SIGSTOP: its connections stay open and answer nothing, as a
    /// partitioned or hung node's would, until the Cluster promotes its
    /// replica.
    Frozen,
}

/// Instance B caches records of one primary; that primary is lost (its
/// replica in sync) and its replica promoted. Then instance A purges each
/// record: every purge succeeds at the first try (A follows the slot to
/// its new primary within the call), and B forwards the next copy within
/// 2 s of the purge instead of replaying its cached answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn cluster_failover_leaves_no_replay_cache_behind() {
    failover_with_cached_records(
        Loss::Killed,
        "cluster_failover_leaves_no_replay_cache_behind",
    )
    .await;
}

/// As above with the primary frozen rather than killed: nothing closes,
/// so only a health check that goes unanswered tells B to stop vouching
/// for what that primary served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn frozen_primary_failover_leaves_no_replay_cache_behind() {
    failover_with_cached_records(
        Loss::Frozen,
        "frozen_primary_failover_leaves_no_replay_cache_behind",
    )
    .await;
}

async fn failover_with_cached_records(loss: Loss, name: &str) {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start();
    let upstream = Upstream::start().await;
    let store = cluster.store("250ms");
    let text = config_text(&store, &upstream.url(), "")
        + &format!("\n[admin]\ntoken = \"literal:{TOKEN}\"\n");
    let (a, b) = (GateProcess::start(&text), GateProcess::start(&text));
    let victim = cluster.primaries()[1].clone();
    let replica = Cluster::replica_of(&victim);
    let ids: Vec<String> = (0..2000)
        .map(|i| format!("cache-failover-{i}"))
        .filter(|id| victim.owns(slot(id)))
        .take(6)
        .collect();
    for id in &ids {
        let first = deliver(&a.url("/notify"), &payment(id)).await;
        assert_eq!(first.replayed(), Some("false"), "{first:?}");
        until_cached(&b, id).await;
    }
    // Every record is on the replica before its primary dies.
    assert_eq!(cli(victim.port, &["WAIT", "1", "5000"]).trim(), "1");

    match loss {
        Loss::Killed => cluster.kill(victim.port),
        Loss::Frozen => cluster.signal(victim.port, "-STOP"),
    }
    wait_until(Duration::from_secs(30), "replica promoted", || {
        role(replica) == "master" && cli(replica, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    });
    let promoted = Instant::now();
    let mut refused = 0;
    let mut slowest_purge = Duration::ZERO;
    let mut slowest_seen = Duration::ZERO;
    for id in &ids {
        let path = format!("/admin/records/pay/{id}?expect_state=completed");
        poll(
            "a purge once the slot has a primary",
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                let purge = admin_delete(a.admin, &path, TOKEN).await;
                if purge.status != 204 {
                    refused += 1;
                }
                (purge.status == 204).then_some(())
            },
        )
        .await;
        slowest_purge = slowest_purge.max(promoted.elapsed());
        let seen = until_forwarded(&b, id, Instant::now(), Duration::from_millis(20)).await;
        slowest_seen = slowest_seen.max(seen);
    }
    assert_executed_times(&upstream, &ids, 2);
    assert_eq!(refused, 0, "a purge succeeds once the slot has a primary");
    println!(
        "[fault] {name}: {} cached keys on the {loss:?} primary; purges refused after the promotion: {refused}, all done {:.2} s after it; \
         slowest purge seen by B after {:.0} ms",
        ids.len(),
        slowest_purge.as_secs_f64(),
        slowest_seen.as_secs_f64() * 1000.0
    );
    if matches!(loss, Loss::Frozen) {
        cluster.signal(victim.port, "-CONT");
    }
    report_time(name, started);
}
