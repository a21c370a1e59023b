//! Redis Cluster: keys spread over the primaries, still exactly once; every
//! primary's eviction settings are checked.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_spreads_keys_and_deduplicates() {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let setup = started.elapsed();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(20))).await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let text = config_text(&store, &upstream.url(), "");
    let gates: Vec<GateProcess> = (0..3).map(|_| GateProcess::start(&text)).collect();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    let ids: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();

    let (answers, elapsed) = hammer(&Sender::new(), &urls, &ids, 6, 64).await;

    assert_identical_answers(&answers, 6);
    assert_exactly_once(&upstream, &ids);
    let primaries = cluster.primaries();
    let held: Vec<HashSet<String>> = primaries.iter().map(|p| scan_records(p.port)).collect();
    for (primary, records) in primaries.iter().zip(&held) {
        assert!(
            !records.is_empty(),
            "primary {} holds records: {records:?}",
            primary.port
        );
    }
    assert_eq!(
        held.iter().map(HashSet::len).sum::<usize>(),
        ids.len(),
        "one record per key, in the whole cluster"
    );
    // Each record sits on the primary that owns its slot (and the key is
    // the docs/contract.md §5 layout, computed here independently).
    for id in &ids {
        let slot = slot(id);
        let owner = primaries
            .iter()
            .position(|p| p.owns(slot))
            .expect("slot owner");
        assert!(
            held[owner].contains(&store_key(id)),
            "{id}: record on the owner of slot {slot}"
        );
    }
    let requests = ids.len() * 6;
    let spread: Vec<String> = primaries
        .iter()
        .zip(&held)
        .map(|(p, r)| format!("{}: {}", p.port, r.len()))
        .collect();
    println!(
        "[fault] redis_cluster_spreads_keys_and_deduplicates: cluster up in {:.1} s; {requests} \
         requests ({} keys x 6) over 3 instances in {:.2} s = {:.0} requests/s; upstream \
         executed {}; records per primary [{}]",
        setup.as_secs_f64(),
        ids.len(),
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64(),
        upstream.calls(),
        spread.join(", ")
    );
    report_time("redis_cluster_spreads_keys_and_deduplicates", started);
}

/// One primary of three may evict: `/readyz` fails and
/// names that primary, although the others (and the URL's first node) are
/// fine; the policy fixed on that node, `/readyz` recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_eviction_is_checked_on_every_primary() {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let evicting = cluster.primaries()[2].port;
    for (name, value) in [("maxmemory", "10mb"), ("maxmemory-policy", "volatile-lru")] {
        assert_eq!(cli(evicting, &["CONFIG", "SET", name, value]).trim(), "OK");
    }
    let upstream = Upstream::start().await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let gate = GateProcess::start(&config_text(&store, &upstream.url(), ""));
    let readyz = async |expected: u16| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (status, body) = admin_get(gate.admin, "/readyz").await;
            if status == expected {
                return body;
            }
            assert!(Instant::now() < deadline, "/readyz {status}: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let body = readyz(503).await;
    assert!(
        body.contains(&format!("127.0.0.1:{evicting}")) && body.contains("volatile-lru"),
        "{body}"
    );
    for other in &cluster.primaries()[..2] {
        assert!(!body.contains(&format!(":{} ", other.port)), "{body}");
    }
    assert_eq!(
        metric(gate.admin, "idemgate_store_eviction_risk").await,
        Some(1.0)
    );

    assert_eq!(
        cli(
            evicting,
            &["CONFIG", "SET", "maxmemory-policy", "noeviction"]
        )
        .trim(),
        "OK"
    );
    readyz(200).await;
    assert_eq!(
        metric(gate.admin, "idemgate_store_eviction_risk").await,
        Some(0.0)
    );
    println!(
        "[fault] redis_cluster_eviction_is_checked_on_every_primary: /readyz named the \
         evicting primary :{evicting} of 3 and recovered after CONFIG SET noeviction"
    );
    report_time(
        "redis_cluster_eviction_is_checked_on_every_primary",
        started,
    );
}

/// The replay cache on a Cluster: instance B caches records held by every
/// primary (each read goes over B's tracking connection to that key's
/// primary); a purge on instance A reaches B through the primary that
/// owns the key, and B forwards the next copy instead of replaying it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_purges_reach_every_instances_replay_cache() {
    const TOKEN: &str = "cluster-cache-token";
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let upstream = Upstream::start().await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let text = config_text(&store, &upstream.url(), "")
        + &format!("\n[admin]\ntoken = \"literal:{TOKEN}\"\n");
    let (a, b) = (GateProcess::start(&text), GateProcess::start(&text));
    let ids: Vec<String> = (0..12).map(|i| format!("cluster-cached-{i}")).collect();
    let primaries = cluster.primaries();
    for primary in &primaries {
        assert!(
            ids.iter().any(|id| primary.owns(slot(id))),
            "a key on every primary"
        );
    }
    for id in &ids {
        let first = deliver(&a.url("/notify"), &payment(id)).await;
        assert_eq!(first.replayed(), Some("false"), "{first:?}");
    }
    // B replays each key until its cache answers it (a hit, no store read).
    for id in &ids {
        until_cached(&b, id).await;
    }
    let mut slowest = Duration::ZERO;
    for id in &ids {
        let path = format!("/admin/records/pay/{id}?expect_state=completed");
        let purge = admin_delete(a.admin, &path, TOKEN).await;
        assert_eq!(purge.status, 204, "{purge:?}");
        let seen = until_forwarded(&b, id, Instant::now(), Duration::from_millis(1)).await;
        slowest = slowest.max(seen);
    }
    assert_executed_times(&upstream, &ids, 2);
    // The purges A did are in the trail B lists: one stream on the Cluster.
    let trail = admin_call("GET", b.admin, "/admin/audit?limit=100", TOKEN).await;
    assert_eq!(trail.status, 200, "{trail:?}");
    let purges = trail.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "purge" && e["outcome"] == "done" && e["after"] == "absent")
        .count();
    assert_eq!(purges, ids.len(), "{trail:?}");
    println!(
        "[fault] redis_cluster_purges_reach_every_instances_replay_cache: {} keys on {} \
         primaries; slowest purge on A seen by B after {:.2} ms",
        ids.len(),
        primaries.len(),
        slowest.as_secs_f64() * 1000.0
    );
    report_time(
        "redis_cluster_purges_reach_every_instances_replay_cache",
        started,
    );
}

/// The replay cache's epoch markers on a Cluster: `FLUSHALL` on one primary
/// (not the one the old single epoch marker lived on) empties every
/// instance's replay cache, so a key that primary held is forwarded again,
/// not replayed from memory for the rest of its retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_flush_of_one_primary_reaches_every_replay_cache() {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let upstream = Upstream::start().await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let text = config_text(&store, &upstream.url(), "");
    let (a, b) = (GateProcess::start(&text), GateProcess::start(&text));
    let primaries = cluster.primaries();
    let old_marker = fred::util::redis_keyslot(b"idemgate:replay-cache-epoch");
    let flushed = primaries
        .iter()
        .find(|p| !p.owns(old_marker))
        .expect("a primary without the old marker");
    let id = (0..1000)
        .map(|i| format!("cluster-flush-{i}"))
        .find(|id| flushed.owns(slot(id)))
        .expect("a key on that primary");
    let first = deliver(&a.url("/notify"), &payment(&id)).await;
    assert_eq!(first.replayed(), Some("false"), "{first:?}");
    until_cached(&b, &id).await;

    assert_eq!(cli(flushed.port, &["FLUSHALL"]).trim(), "OK");
    let flushed_at = Instant::now();
    let seen = poll(
        "instance B forwarding after FLUSHALL on one primary",
        Duration::from_secs(5),
        Duration::from_millis(20),
        async || {
            let answer = deliver(&b.url("/notify"), &payment(&id)).await;
            (answer.replayed() == Some("false")).then(|| flushed_at.elapsed())
        },
    )
    .await;
    let server_flushes = metric(
        b.admin,
        "idemgate_replay_cache_flushes_total{reason=\"server\"}",
    )
    .await;
    assert!(server_flushes >= Some(1.0), "{server_flushes:?}");
    assert_executed_times(&upstream, std::slice::from_ref(&id), 2);
    println!(
        "[fault] redis_cluster_flush_of_one_primary_reaches_every_replay_cache: FLUSHALL on \
         :{} seen by instance B after {:.2} s",
        flushed.port,
        seen.as_secs_f64()
    );
    report_time(
        "redis_cluster_flush_of_one_primary_reaches_every_replay_cache",
        started,
    );
}
