//! A Cluster failover with replication lag at `durability = "replicated"`:
//! the replica is frozen for a second before its primary is SIGKILLed, so
//! the primary's last writes never reach the node that is promoted. At
//! `memory` such a failover loses answers the senders already have, and
//! once lease + `unknown_hold` pass a copy runs again. At `replicated` a
//! claim is forwarded only once a replica holds it, and an answer is
//! stored again until one does: every delivery answered 2xx runs once and
//! its copies get its answer.

use super::failover::{Lag, check_failover, failover_gates, run_failover};
use super::failover_ops::ClusterFailover;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn cluster_failover_with_lag_loses_no_answer_at_replicated() {
    const NAME: &str = "cluster_failover_with_lag_loses_no_answer_at_replicated";
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start_with_aof();
    let (upstream, gates, urls) = failover_gates(&cluster.url(), "replicated").await;
    // Readiness probes every 500 ms, as a kubelet would: each one runs the
    // durability check, which must not stop the healthy primaries' slots
    // while the promoted primary has no replica.
    let probing = Arc::new(AtomicBool::new(true));
    let probes: Vec<_> = gates
        .iter()
        .map(|gate| {
            let (admin, probing) = (gate.admin, Arc::clone(&probing));
            tokio::spawn(async move {
                while probing.load(Ordering::SeqCst) {
                    let _ = admin_get(admin, "/readyz").await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        })
        .collect();
    let mut ops = ClusterFailover::of_second_primary(&mut cluster);
    let victim = ops.victim.clone();
    let in_victim = |id: &str| victim.owns(slot(id));

    let report = run_failover(
        &mut ops,
        Lag::FrozenReplica,
        &urls,
        &upstream,
        "lag",
        &in_victim,
    )
    .await;

    probing.store(false, Ordering::SeqCst);
    for probe in probes {
        probe.await.expect("readiness probe task");
    }
    let unstored = check_failover(NAME, &report);
    assert_eq!(
        unstored, 0,
        "every answered delivery's copies got its answer after the failover"
    );
    report_time(NAME, started);
}
