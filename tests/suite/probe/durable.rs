//! Probes kept in the store: an unknown outcome is probed by whichever
//! instance is alive — after the instance that recorded it is SIGKILLed,
//! after an owner dies mid-call, after every instance restarts — exactly
//! once at a time; bounded when the handler stalls; never sent to a path
//! the template does not name. Real `idemgate` processes, a real Redis
//! and the embedded store, a real handler.

use super::*;

/// The probe configuration with a 1 s lease, so a dead owner's claim is
/// noticed quickly.
fn short_lease(store: &str, upstream: &Upstream) -> String {
    config(store, upstream).replace(
        "unknown_hold = \"1m\"",
        "unknown_hold = \"1m\"\nlease = \"1s\"",
    )
}

/// Delivers `body` through `url` until it is replayed; how long that took.
async fn until_resolved(url: &str, body: &str, limit: Duration) -> (Answer, Duration) {
    let started = Instant::now();
    let resolved = deliver_until_served(url, body, limit).await;
    (resolved, started.elapsed())
}

/// The record view of `id` on the test route.
async fn record_view(admin: std::net::SocketAddr, id: &str) -> serde_json::Value {
    let auth = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let view = send(
        "GET",
        &format!("http://{admin}/admin/records/pay/{id}"),
        &auth,
        "",
    )
    .await;
    serde_json::from_slice(&view.body).unwrap_or_default()
}

const TOKEN: &str = "probe-durable-token";

fn with_admin(text: &str) -> String {
    format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_is_probed_by_another_instance_after_its_recorder_is_killed() {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let redis = RedisServer::start();
    let text = with_admin(&config(&redis_store(&redis), &upstream));
    let (mut a, b) = (GateProcess::start(&text), GateProcess::start(&text));
    let body = payment("durable-1");
    let lost = deliver(&a.url("/notify"), &body).await;
    assert_eq!(lost.reason().as_deref(), Some("upstream_timeout"));
    a.kill();
    let unknown_at = Instant::now();
    // The plan is in the store, for the operator too.
    let view = record_view(b.admin, "durable-1").await;
    assert_eq!(view["state"], "unknown", "{view}");
    assert_eq!(view["probe"]["attempts"], 0, "{view}");
    assert_eq!(view["probe"]["target"], "/orders/durable-1", "{view}");
    assert!(view["probe"]["next_attempt_at_ms"].is_u64(), "{view}");
    let (resolved, _) = until_resolved(&b.url("/notify"), &body, Duration::from_secs(6)).await;
    assert_eq!(
        (resolved.status, resolved.replayed()),
        (200, Some("true")),
        "{resolved:?}"
    );
    assert_eq!(resolved.header("idempotent-resolved"), Some("probe"));
    eprintln!(
        "measured: redis, recorder SIGKILLed: unknown -> resolved in {:?}",
        unknown_at.elapsed()
    );
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1, "executed once");
    assert_eq!(handler.probes.lock().unwrap().len(), 1, "probed once");
}

/// An owner SIGKILLed while the handler works on its delivery: the other
/// instance (`shared`: running all along on the same Redis) or the owner
/// restarted (the embedded store) probes it once the dead owner's lease
/// has run out and `start_after` has passed.
async fn owner_killed_mid_call(store: &str, shared: bool) -> Duration {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let text = short_lease(store, &upstream);
    let mut owner = GateProcess::start(&text);
    let other = shared.then(|| GateProcess::start(&text));
    let body = payment("durable-2");
    let url = owner.url("/notify");
    let sent = tokio::spawn({
        let body = body.clone();
        async move { Sender::new().deliver(&url, &body).await }
    });
    assert!(
        eventually(Duration::from_secs(5), || upstream.calls() == 1).await,
        "the handler got the delivery"
    );
    owner.kill();
    let killed = Instant::now();
    assert!(
        sent.await.unwrap().is_err(),
        "no answer from a killed owner"
    );
    let survivor = other.unwrap_or_else(|| GateProcess::start(&text));
    let (resolved, _) =
        until_resolved(&survivor.url("/notify"), &body, Duration::from_secs(10)).await;
    assert_eq!(
        (resolved.status, resolved.replayed()),
        (200, Some("true")),
        "{resolved:?}"
    );
    assert_eq!(resolved.header("idempotent-resolved"), Some("probe"));
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1, "executed once");
    assert_eq!(handler.probes.lock().unwrap().len(), 1, "probed once");
    killed.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_mid_call_is_probed_by_another_instance_on_redis() {
    let redis = RedisServer::start();
    let took = owner_killed_mid_call(&redis_store(&redis), true).await;
    eprintln!("measured: redis, owner SIGKILLed mid-call: kill -> resolved in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_mid_call_is_probed_after_a_restart_on_the_embedded_store() {
    let (_dir, store) = temp_embedded_store();
    let took = owner_killed_mid_call(&store, false).await;
    eprintln!("measured: embedded, owner SIGKILLed mid-call: kill -> resolved in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_probe_survives_a_restart_on_the_embedded_store() {
    let (upstream, handler) = handler(Behaviour::HangsBeforeApplying).await;
    let (_dir, store) = temp_embedded_store();
    let text = config(&store, &upstream);
    let mut first = GateProcess::start(&text);
    let body = payment("durable-3");
    assert_eq!(deliver(&first.url("/notify"), &body).await.status, 504);
    first.kill();
    let unknown_at = Instant::now();
    let second = GateProcess::start(&text);
    handler.until_probed(1, Duration::from_secs(6)).await;
    eprintln!(
        "measured: embedded, recorder SIGKILLed and restarted: unknown -> probed in {:?}",
        unknown_at.elapsed()
    );
    // Not applied: released, so the next copy executes, once.
    let retry = deliver_until_served(&second.url("/notify"), &body, Duration::from_secs(3)).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(handler.applied.lock().unwrap().len(), 1, "applied once");
    assert_eq!(handler.probes.lock().unwrap().len(), 1, "probed once");
}

/// A deploy: both instances stopped (SIGTERM) with a shutdown grace
/// shorter than `start_after`, as the documented defaults are (30 s
/// against 60 s), then replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_restarted_the_probe_still_runs_once() {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let redis = RedisServer::start();
    let text = config(&redis_store(&redis), &upstream)
        .replace("shutdown_grace = \"5s\"", "shutdown_grace = \"100ms\"");
    let mut old = [GateProcess::start(&text), GateProcess::start(&text)];
    let body = payment("durable-4");
    assert_eq!(deliver(&old[0].url("/notify"), &body).await.status, 504);
    for gate in &mut old {
        gate.terminate();
    }
    let new = [GateProcess::start(&text), GateProcess::start(&text)];
    let (resolved, _) = until_resolved(&new[1].url("/notify"), &body, Duration::from_secs(6)).await;
    assert_eq!(resolved.replayed(), Some("true"), "{resolved:?}");
    // Both instances look every second: give them two more looks.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(handler.probes.lock().unwrap().len(), 1, "one probe in all");
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1);
    drop(new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_could_reach_another_resource_gets_no_probe() {
    let (upstream, handler) = handler(Behaviour::Stalled).await;
    let redis = RedisServer::start();
    let gate = GateProcess::start(&config(&redis_store(&redis), &upstream));
    for id in ["..", "."] {
        let lost = deliver(&gate.url("/notify"), &payment(id)).await;
        assert_eq!(lost.reason().as_deref(), Some("upstream_timeout"));
    }
    let series =
        |reason: &str| format!("idemgate_probe_skipped_total{{route=\"pay\",reason=\"{reason}\"}}");
    assert_eq!(metric(gate.admin, &series("dot_segment")).await, Some(2.0));
    // Past start_after and a look: still no probe, and still unknown.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        handler.probes.lock().unwrap().len(),
        0,
        "{:?}",
        upstream.targets()
    );
    let copy = deliver(&gate.url("/notify"), &payment("..")).await;
    assert_eq!(copy.reason().as_deref(), Some("outcome_unknown"));
    // Counted for the deliveries forwarded without one, not for copies.
    assert_eq!(metric(gate.admin, &series("dot_segment")).await, Some(2.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_of_a_stalled_handler_are_bounded_per_instance() {
    let (upstream, handler) = handler(Behaviour::Stalled).await;
    let redis = RedisServer::start();
    let text = config(&redis_store(&redis), &upstream)
        .replace("max_attempts = 2", "max_attempts = 1\nconcurrency = 2");
    let gate = GateProcess::start(&text);
    let deliveries: Vec<_> = (0..12)
        .map(|i| {
            let url = gate.url("/notify");
            tokio::spawn(async move { deliver(&url, &payment(&format!("herd-{i}"))).await })
        })
        .collect();
    for delivery in deliveries {
        assert_eq!(delivery.await.unwrap().status, 504);
    }
    handler.until_probed(12, Duration::from_secs(15)).await;
    // Each probe holds its connection for its whole 300 ms timeout (the
    // probe endpoint stalls): with two at a time, no 250 ms window sees
    // a third start.
    let probes = handler.probes.lock().unwrap().clone();
    let crowded = probes
        .iter()
        .map(|start| {
            probes
                .iter()
                .filter(|other| **other >= *start && **other - *start < Duration::from_millis(250))
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(crowded <= 2, "{crowded} probes started within 250 ms");
    let spread = *probes.iter().max().unwrap() - *probes.iter().min().unwrap();
    eprintln!("measured: 12 stalled probes at concurrency 2 spread over {spread:?}");
}

/// On an entity route, a probe that hears "applied" applies the entity's
/// change in the step that completes the record, as a stored answer
/// would: the entity's next notice goes through.
async fn an_applied_probe_advances_the_entity(kind: StoreKind) {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let (store, _redis, _dir) = fresh_store(kind);
    let text = config_text(&store, &upstream.url(), &format!("{PROBE}{ENTITY_MACHINE}"))
        .replace("timeout = \"5s\"", "timeout = \"500ms\"");
    let gate = Gate::start(&text).await;
    let url = gate.url("/notify");
    let pending = entity_notice("entity-probe-1", "o-probe", "pending");
    assert_eq!(deliver(&url, &pending).await.status, 504);
    let (resolved, _) = until_resolved(&url, &pending, Duration::from_secs(6)).await;
    assert_eq!(
        resolved.header("idempotent-resolved"),
        Some("probe"),
        "{resolved:?}"
    );
    let success = deliver(&url, &entity_notice("entity-probe-2", "o-probe", "success")).await;
    assert_eq!(
        (success.status, success.replayed()),
        (200, Some("false")),
        "{success:?}"
    );
    assert_eq!(handler.deliveries.lock().unwrap().len(), 2);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_probe_advances_the_entity_on_redis() {
    an_applied_probe_advances_the_entity(StoreKind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_probe_advances_the_entity_on_the_embedded_store() {
    an_applied_probe_advances_the_entity(StoreKind::Embedded).await;
}
