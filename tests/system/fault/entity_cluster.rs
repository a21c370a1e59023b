//! Entity state on a real Redis Cluster: an entity and every record of it
//! share one slot (the entity's hash tag), so `claim_entity.lua` judges and
//! claims in one step on the primary that owns it, while entities spread
//! over all primaries. Two instances, notices out of order and at once.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_keeps_each_entitys_machine_in_one_slot() {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let upstream = Upstream::start().await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let text = config_text(&store, &upstream.url(), ENTITY_MACHINE);
    let gates: Vec<GateProcess> = (0..2).map(|_| GateProcess::start(&text)).collect();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    let orders: Vec<String> = (0..40).map(|i| format!("cl-{i}")).collect();

    // Per order, through alternating instances: pending and success go
    // through; a late failure is refused, a second success is a repeat,
    // the refund goes through. The failure and the repeat race the success.
    let mut runs = Vec::new();
    for order in &orders {
        let (a, b) = (urls[0].clone(), urls[1].clone());
        let order = order.clone();
        runs.push(tokio::spawn(async move {
            let n = |s: &str| format!("{order}-{s}");
            let first = deliver(&a, &entity_notice(&n("p"), &order, "pending")).await;
            assert_eq!(first.status, 200, "{first:?}");
            let bodies = [
                entity_notice(&n("s"), &order, "success"),
                entity_notice(&n("f"), &order, "failed"),
                entity_notice(&n("s2"), &order, "success"),
            ];
            let (success, late, again) = tokio::join!(
                deliver(&b, &bodies[0]),
                deliver(&a, &bodies[1]),
                deliver(&a, &bodies[2]),
            );
            for answer in [&success, &late, &again] {
                assert_eq!(answer.status, 200, "{answer:?}");
            }
            let refund = deliver(&b, &entity_notice(&n("r"), &order, "refunded")).await;
            assert_eq!(refund.status, 200, "{refund:?}");
        }));
    }
    for run in runs {
        run.await.unwrap();
    }

    // The handler saw, per order, either pending → success → refunded, or
    // (the failure won the race) pending → failed → success → refunded;
    // never a regression, never a state twice.
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    for body in upstream.bodies() {
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        seen.entry(value["order"].as_str().unwrap().to_owned())
            .or_default()
            .push(value["status"].as_str().unwrap().to_owned());
    }
    let mut failure_first = 0;
    for order in &orders {
        let statuses = seen.get(order).cloned().unwrap_or_default();
        match statuses.as_slice() {
            [p, s, r] if p == "pending" && s == "success" && r == "refunded" => {}
            [p, f, s, r]
                if p == "pending" && f == "failed" && s == "success" && r == "refunded" =>
            {
                failure_first += 1;
            }
            other => panic!("{order}: the handler saw {other:?}"),
        }
    }

    // Every entity sits with all its records on one primary, and the
    // entities spread over the primaries.
    let primaries = cluster.primaries();
    let mut holders: HashMap<String, HashSet<u16>> = HashMap::new();
    let mut entities_per_primary = Vec::new();
    for primary in &primaries {
        let keys = scan_records(primary.port);
        entities_per_primary.push(keys.iter().filter(|k| k.contains(":entity:")).count());
        for key in keys {
            let tag = key
                .rsplit_once('{')
                .map(|(_, t)| t.to_owned())
                .unwrap_or_default();
            holders.entry(tag).or_default().insert(primary.port);
        }
    }
    assert_eq!(
        holders.len(),
        orders.len(),
        "one tag per order: {holders:?}"
    );
    assert!(
        holders.values().all(|ports| ports.len() == 1),
        "{holders:?}"
    );
    assert!(
        entities_per_primary.iter().all(|n| *n > 0),
        "entities on every primary: {entities_per_primary:?}"
    );
    println!(
        "[fault] redis_cluster_keeps_each_entitys_machine_in_one_slot: {} orders over 2 instances; \
         the failure won the race {failure_first} times (then the success ran after it); entities \
         per primary {entities_per_primary:?}; {:.1} s",
        orders.len(),
        started.elapsed().as_secs_f64()
    );
    report_time(
        "redis_cluster_keeps_each_entitys_machine_in_one_slot",
        started,
    );
}
