//! Many idemgate instances on one Redis: every key executes exactly once.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_one_redis() {
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(20))).await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let gates: Vec<GateProcess> = (0..3).map(|_| GateProcess::start(&text)).collect();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    let ids: Vec<String> = (0..500).map(|i| format!("multi-{i}")).collect();

    let (answers, elapsed) = hammer(&Sender::new(), &urls, &ids, 8, 64).await;

    assert_identical_answers(&answers, 8);
    assert_exactly_once(&upstream, &ids);
    assert_eq!(redis.keys(RECORDS).len(), 500, "one record per key");
    let requests = ids.len() * 8;
    println!(
        "[fault] many_instances_one_redis: {requests} requests ({} keys x 8) over 3 instances, \
         64 in flight, in {:.2} s = {:.0} requests/s; upstream executed {} (distinct ids {}), \
         {} replays",
        ids.len(),
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64(),
        upstream.calls(),
        executions(&upstream).len(),
        requests - upstream.calls()
    );
    report_time("many_instances_one_redis", started);
}
