//! Probes kept in the store on a real Redis Cluster: a record, its probe
//! plan and its due entry share the record's slot, so any instance takes
//! the probe of an unknown outcome on whichever primary holds it. The
//! owner is SIGKILLed mid-call and the other instance resolves every
//! delivery; then every instance is replaced and each probe still runs
//! exactly once.

use super::*;

const PROBE_ROUTE: &str = r#"unknown_hold = "1m"
lease = "1s"
[route.probe]
path = "/orders/{json:/id}"
handler_deadline = "300ms"
retry_every = "300ms"
max_attempts = 3
timeout = "300ms"
answer = "probe"
"#;

/// Each id's first delivery is applied and answered too late (2 s, past
/// the 500 ms upstream timeout); a probe hears "PAID".
async fn applying_handler() -> Upstream {
    let seen = Mutex::new(HashSet::new());
    Upstream::scripted(move |_, body: &bytes::Bytes| {
        if body.is_empty() {
            return Reply::with_body(bytes::Bytes::from_static(br#"{"state":"PAID"}"#));
        }
        if seen.lock().unwrap().insert(id_of(body)) {
            Reply::slow(Duration::from_secs(2))
        } else {
            Reply::ok()
        }
    })
    .await
}

/// Deliveries of `id` the handler got (bodies naming it).
fn executions(upstream: &Upstream, id: &str) -> usize {
    upstream
        .bodies()
        .iter()
        .filter(|body| !body.is_empty() && id_of(body) == id)
        .count()
}

/// Probes of `id` the handler got (GETs of /orders/{id}).
fn probes(upstream: &Upstream, id: &str) -> usize {
    let target = format!("/orders/{id}");
    upstream
        .targets()
        .iter()
        .filter(|(method, path)| method == "GET" && path.ends_with(&target))
        .count()
}

/// Delivers every id through `url` until each is replayed as resolved by
/// a probe; the longest wait.
async fn all_resolved(url: &str, ids: &[String]) -> Duration {
    let started = Instant::now();
    for id in ids {
        let resolved = deliver_until_served(url, &payment(id), Duration::from_secs(20)).await;
        assert_eq!(
            (resolved.status, resolved.replayed()),
            (200, Some("true")),
            "{id}: {resolved:?}"
        );
        assert_eq!(
            resolved.header("idempotent-resolved"),
            Some("probe"),
            "{id}"
        );
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_probes_survive_a_killed_owner_and_a_replaced_fleet() {
    let _lane = CLUSTER_LANE.lock().await;
    let cluster = Cluster::start();
    let upstream = applying_handler().await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let text = config_text(&store, &upstream.url(), PROBE_ROUTE)
        .replace("timeout = \"5s\"", "timeout = \"500ms\"");
    let mut owner = GateProcess::start(&text);
    let other = GateProcess::start(&text);

    // Phase 1: the owner dies with 12 calls in flight.
    let ids: Vec<String> = (0..12).map(|i| format!("pc-{i}")).collect();
    let sender = Sender::new();
    let stranded: Vec<_> = ids
        .iter()
        .map(|id| {
            let (sender, url, body) = (sender.clone(), owner.url("/notify"), payment(id));
            tokio::spawn(async move { sender.deliver(&url, &body).await })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || upstream.calls() >= 12).await,
        "every delivery reached the handler"
    );
    owner.kill();
    let killed = Instant::now();
    for task in stranded {
        assert!(
            task.await.unwrap().is_err(),
            "no answer from a killed owner"
        );
    }
    all_resolved(&other.url("/notify"), &ids).await;
    eprintln!(
        "measured: cluster, owner SIGKILLed mid-call with 12 in flight: kill -> all resolved by the other instance in {:?}",
        killed.elapsed()
    );
    for id in &ids {
        assert_eq!(executions(&upstream, id), 1, "{id} executed once");
        assert_eq!(probes(&upstream, id), 1, "{id} probed once");
    }

    // Phase 2: outcomes recorded unknown, then every instance replaced.
    let later: Vec<String> = (0..12).map(|i| format!("pr-{i}")).collect();
    for id in &later {
        let lost = deliver(&other.url("/notify"), &payment(id)).await;
        assert_eq!(lost.reason().as_deref(), Some("upstream_timeout"), "{id}");
    }
    drop(other);
    let replaced = Instant::now();
    let fleet = [GateProcess::start(&text), GateProcess::start(&text)];
    all_resolved(&fleet[0].url("/notify"), &later).await;
    eprintln!(
        "measured: cluster, fleet replaced with 12 unknown outcomes: -> all resolved in {:?}",
        replaced.elapsed()
    );
    // Two more looks by both instances: no second probe.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    for id in &later {
        assert_eq!(executions(&upstream, id), 1, "{id} executed once");
        assert_eq!(probes(&upstream, id), 1, "{id} probed once");
    }

    // What the looks cost the primaries while nothing is due: two
    // instances, 5 s (reported, not asserted: the machine is shared).
    let primaries = cluster.primaries();
    for primary in &primaries {
        cli(primary.port, &["CONFIG", "RESETSTAT"]);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (mut calls, mut usec) = (0u64, 0u64);
    for primary in &primaries {
        let stats = cli(primary.port, &["INFO", "commandstats"]);
        let line = stats
            .lines()
            .find(|line| line.starts_with("cmdstat_zrangebyscore:"))
            .unwrap_or_default();
        let field = |name: &str| -> u64 {
            line.split([':', ','])
                .find_map(|part| part.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        calls += field("calls");
        usec += field("usec");
    }
    eprintln!(
        "measured: cluster, idle looks of 2 instances over 5 s: {calls} ZRANGEBYSCORE on 3 primaries, {usec} us of their CPU ({:.2}% of one core per primary)",
        usec as f64 / 5e6 / 3.0 * 100.0
    );
}
