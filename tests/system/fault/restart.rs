//! A Redis restart without persistence forgets every record.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_forgets() {
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    let (mut redis, upstream, gate) = redis_gate("").await;
    let url = gate.url("/notify");
    let body = payment("forgotten");
    assert_eq!(deliver(&url, &body).await.replayed(), Some("false"));
    assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));

    redis.restart(); // --save '' --appendonly no: the data set is gone
    let restarted = Instant::now();
    let mut refused = 0;
    let mut again = None;
    for _ in 0..100 {
        let answer = deliver(&url, &body).await;
        if answer.status == 200 {
            again = Some(answer);
            break;
        }
        assert_eq!(answer.status, 503, "{answer:?}");
        refused += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = again.expect("idemgate reconnects to the restarted Redis");
    assert_eq!(
        again.replayed(),
        Some("false"),
        "the record was lost with the restart, so the retry is forwarded again"
    );
    assert_eq!(
        upstream.calls(),
        2,
        "a second execution: documented behaviour"
    );
    assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));
    gate.stop().await;
    println!(
        "[fault] redis_restart_without_persistence_forgets: after a restart without \
         persistence the completed key was executed a second time (upstream calls 2); \
         {refused} x 503 while reconnecting, first answer {:.2} s after the restart. \
         NOTE: a Redis that may restart needs persistence (appendonly) or replicas.",
        restarted.elapsed().as_secs_f64()
    );
    report_time("redis_restart_without_persistence_forgets", started);
}
