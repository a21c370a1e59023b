//! The inbox's repair pass (docs/contract.md §4 rule 13, §5 owed sets): a
//! queued delivery is findable again from its own record.
//! The scope's index keys are deleted behind idemgate's back (what a
//! Redis Cluster failover of the index's primary with replication lag
//! does to them); the repair pass finds every delivery again from the
//! owed sets written with the records, and each executes exactly once.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_whose_index_entries_were_lost_are_found_from_their_records() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let (port, url) = absent_handler();
    let inbox = format!("{PATIENT}\nrepair_every = \"1s\"");
    let text = inbox_config(&redis_store(&redis), &url, &inbox);
    let gate = GateProcess::start(&text);
    let ids: Vec<String> = (0..30).map(|i| format!("lost-index-{i}")).collect();
    assert_acknowledged(&deliver_copies(&[gate.url("/notify")], &ids, 2).await);
    assert_eq!(listed(gate.admin, "queued").await.len(), ids.len());

    let lost = ["idemgate:pay:inbox:due", "idemgate:pay:inbox:since"];
    let deleted = redis.cli(&["DEL", lost[0], lost[1]]);
    assert_eq!(deleted.trim(), "2", "both indexes existed");
    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    let started = Instant::now();
    drained_once(gate.admin, &handler, &ids, Duration::from_secs(30)).await;
    let repaired = metric(gate.admin, "idemgate_inbox_repaired_total{route=\"pay\"}").await;
    assert_eq!(repaired, Some(ids.len() as f64), "each put back once");
    assert_eq!(
        redis.cli(&["SCARD", "idemgate:pay:inbox:owed"]).trim(),
        "0",
        "delivered deliveries leave the owed set"
    );
    println!(
        "[inbox] {} deliveries whose due and since entries were deleted: all delivered once, {:.1} s after the handler came back (repair_every 1s)",
        ids.len(),
        started.elapsed().as_secs_f64()
    );
}
