//! `[route.probe]`: an unknown outcome resolved by asking a real handler,
//! on a real Redis (and the embedded store once). The handler's upstream
//! timeout is 500 ms; it declares a 300 ms deadline, so a probe may start
//! 800 ms after the call ended.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::support::*;

mod durable;
mod model;
mod redeliveries;

const PROBE: &str = r#"unknown_hold = "1m"
[route.probe]
path = "/orders/{json:/id}"
handler_deadline = "300ms"
retry_every = "200ms"
max_attempts = 2
timeout = "300ms"
answer = "probe"
"#;

/// What the handler did: the ids it applied, and when each call arrived
/// (probes are the calls without a body).
#[derive(Default)]
struct Handler {
    applied: Mutex<HashSet<String>>,
    deliveries: Mutex<Vec<Instant>>,
    probes: Mutex<Vec<Instant>>,
}

impl Handler {
    /// Waits until the handler has been probed `times`, at most `limit`.
    async fn until_probed(&self, times: usize, limit: Duration) {
        let probed = eventually(limit, || self.probes.lock().unwrap().len() >= times).await;
        assert!(probed, "probed {times} time(s) within {limit:?}");
    }
}

/// How the test handler behaves.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Applies the first delivery, then answers too late (lost answer).
    AppliesThenHangs,
    /// Never gets to apply the first delivery (it hangs before), applies
    /// later ones at once.
    HangsBeforeApplying,
    /// Like `AppliesThenHangs`, but its probe endpoint hangs too.
    ProbeHangs,
    /// Applies every delivery and answers each too late, probes too: a
    /// stalled handler.
    Stalled,
}

async fn handler(behaviour: Behaviour) -> (Upstream, Arc<Handler>) {
    let state = Arc::new(Handler::default());
    let seen = Arc::clone(&state);
    let upstream = Upstream::scripted(move |_, body: &Bytes| {
        let now = Instant::now();
        if body.is_empty() {
            seen.probes.lock().unwrap().push(now);
            if matches!(behaviour, Behaviour::ProbeHangs | Behaviour::Stalled) {
                return Reply::slow(Duration::from_secs(2));
            }
            return if seen.applied.lock().unwrap().is_empty() {
                Reply::status(404)
            } else {
                Reply::with_body(Bytes::from_static(br#"{"state":"PAID"}"#))
            };
        }
        let first = {
            let mut deliveries = seen.deliveries.lock().unwrap();
            deliveries.push(now);
            deliveries.len() == 1
        };
        let value: serde_json::Value = serde_json::from_slice(body).unwrap();
        let id = value["id"].as_str().unwrap().to_owned();
        match behaviour {
            Behaviour::HangsBeforeApplying if first => Reply::slow(Duration::from_secs(2)),
            Behaviour::HangsBeforeApplying => {
                seen.applied.lock().unwrap().insert(id);
                Reply::ok()
            }
            Behaviour::Stalled => {
                seen.applied.lock().unwrap().insert(id);
                Reply::slow(Duration::from_secs(2))
            }
            Behaviour::AppliesThenHangs | Behaviour::ProbeHangs => {
                seen.applied.lock().unwrap().insert(id);
                if first {
                    Reply::slow(Duration::from_secs(2))
                } else {
                    Reply::ok()
                }
            }
        }
    })
    .await;
    (upstream, state)
}

/// The test configuration with a 500 ms upstream timeout.
fn config(store: &str, upstream: &Upstream) -> String {
    config_text(store, &upstream.url(), PROBE).replace("timeout = \"5s\"", "timeout = \"500ms\"")
}

async fn applied_but_lost_is_replayed(gate: &Gate, upstream: &Upstream, handler: &Handler) {
    let url = gate.url("/notify");
    let body = payment("probe-1");
    let lost = deliver(&url, &body).await;
    assert_eq!(
        (lost.status, lost.reason().as_deref()),
        (504, Some("upstream_timeout"))
    );
    let blocked = deliver(&url, &body).await;
    assert_eq!(blocked.reason().as_deref(), Some("outcome_unknown"));
    handler.until_probed(1, Duration::from_secs(5)).await;
    let resolved = deliver_until_served(&url, &body, Duration::from_secs(3)).await;
    assert_eq!(
        (resolved.status, resolved.replayed()),
        (200, Some("true")),
        "{resolved:?}"
    );
    assert_eq!(resolved.header("idempotent-resolved"), Some("probe"));
    assert_eq!(&resolved.body[..], br#"{"state":"PAID"}"#);
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1, "executed once");
    // Never before the declared deadline: the call ended at the 500 ms
    // timeout, and the handler may work 300 ms more.
    let first = handler.deliveries.lock().unwrap()[0];
    let probed = handler.probes.lock().unwrap()[0];
    assert!(
        probed - first >= Duration::from_millis(800),
        "probed {:?} after the delivery",
        probed - first
    );
    let targets = upstream.targets();
    assert!(
        targets.contains(&("GET".to_owned(), "/orders/probe-1".to_owned())),
        "{targets:?}"
    );
}

#[tokio::test]
async fn an_applied_delivery_whose_answer_was_lost_is_resolved_applied_on_redis() {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let redis = RedisServer::start();
    let gate = Gate::start(&config(&redis_store(&redis), &upstream)).await;
    applied_but_lost_is_replayed(&gate, &upstream, &handler).await;
    gate.stop().await;
}

#[tokio::test]
async fn an_applied_delivery_whose_answer_was_lost_is_resolved_applied_on_the_embedded_store() {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let (_dir, store) = temp_embedded_store();
    let gate = Gate::start(&config(&store, &upstream)).await;
    applied_but_lost_is_replayed(&gate, &upstream, &handler).await;
    gate.stop().await;
}

#[tokio::test]
async fn a_delivery_never_applied_is_released_and_its_retry_executes_once() {
    let (upstream, handler) = handler(Behaviour::HangsBeforeApplying).await;
    let redis = RedisServer::start();
    let gate = Gate::start(&config(&redis_store(&redis), &upstream)).await;
    let url = gate.url("/notify");
    let body = payment("probe-2");
    assert_eq!(deliver(&url, &body).await.status, 504);
    handler.until_probed(1, Duration::from_secs(5)).await;
    let retry = deliver_until_served(&url, &body, Duration::from_secs(3)).await;
    assert_eq!(
        (retry.status, retry.replayed()),
        (200, Some("false")),
        "{retry:?}"
    );
    let again = deliver(&url, &body).await;
    assert_eq!(again.replayed(), Some("true"));
    assert_eq!(handler.applied.lock().unwrap().len(), 1, "applied once");
    assert_eq!(handler.deliveries.lock().unwrap().len(), 2);
    gate.stop().await;
}

#[tokio::test]
async fn a_probe_that_times_out_leaves_the_outcome_unknown() {
    let (upstream, handler) = handler(Behaviour::ProbeHangs).await;
    let redis = RedisServer::start();
    let gate = Gate::start(&config(&redis_store(&redis), &upstream)).await;
    let url = gate.url("/notify");
    let body = payment("probe-3");
    assert_eq!(deliver(&url, &body).await.status, 504);
    handler.until_probed(2, Duration::from_secs(6)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let blocked = deliver(&url, &body).await;
    assert_eq!(
        (blocked.status, blocked.reason().as_deref()),
        (409, Some("outcome_unknown"))
    );
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1);
    gate.stop().await;
}

#[tokio::test]
async fn one_probe_in_all_when_two_instances_see_the_unknown_record() {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let redis = RedisServer::start();
    let text = config(&redis_store(&redis), &upstream);
    let (a, b) = (Gate::start(&text).await, Gate::start(&text).await);
    let body = payment("probe-4");
    assert_eq!(deliver(&a.url("/notify"), &body).await.status, 504);
    // Copies through the other instance while the outcome is unknown.
    for _ in 0..3 {
        let copy = deliver(&b.url("/notify"), &body).await;
        assert_eq!(copy.reason().as_deref(), Some("outcome_unknown"));
    }
    let resolved = deliver_until_served(&b.url("/notify"), &body, Duration::from_secs(4)).await;
    assert_eq!((resolved.status, resolved.replayed()), (200, Some("true")));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(handler.probes.lock().unwrap().len(), 1, "one probe in all");
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_resolution_is_counted_and_shown_in_the_record_view() {
    let (upstream, handler) = handler(Behaviour::AppliesThenHangs).await;
    let redis = RedisServer::start();
    let token = "probe-admin-token";
    let text = format!(
        "{}\n[admin]\ntoken = \"literal:{token}\"\n",
        config(&redis_store(&redis), &upstream)
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let body = payment("probe-5");
    assert_eq!(deliver(&url, &body).await.status, 504);
    let resolved = deliver_until_served(&url, &body, Duration::from_secs(5)).await;
    assert_eq!(resolved.replayed(), Some("true"), "{resolved:?}");
    let series = |result: &str| {
        format!("idemgate_probe_resolutions_total{{route=\"pay\",result=\"{result}\"}}")
    };
    assert_eq!(metric(gate.admin, &series("applied")).await, Some(1.0));
    assert_eq!(metric(gate.admin, &series("not_applied")).await, Some(0.0));
    let auth = vec![("authorization".to_owned(), format!("Bearer {token}"))];
    let view = send(
        "GET",
        &format!("http://{}/admin/records/pay/probe-5", gate.admin),
        &auth,
        "",
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&view.body).unwrap();
    assert_eq!(json["state"], "completed", "{json}");
    assert_eq!(json["resolved_by"], "probe", "{json}");
    assert_eq!(handler.deliveries.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_is_traced_and_linked_to_the_delivery() {
    let (upstream, _handler) = handler(Behaviour::AppliesThenHangs).await;
    let receiver = OtlpReceiver::start().await;
    let redis = RedisServer::start();
    let text = format!(
        "{}\n[tracing]\notlp_endpoint = \"{}\"\n",
        config(&redis_store(&redis), &upstream),
        receiver.url()
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let body = payment("probe-6");
    assert_eq!(deliver(&url, &body).await.status, 504);
    let spans = receiver
        .wait_for(Duration::from_secs(15), "the probe's span", |spans| {
            spans.iter().any(|s| s.name() == "probe")
        })
        .await;
    let probe = spans.iter().find(|s| s.name() == "probe").unwrap();
    let delivery = spans
        .iter()
        .find(|s| s.attribute("idemgate.outcome").as_deref() == Some("forwarded"))
        .expect("the delivery's span");
    let links: Vec<(String, String)> = probe
        .span
        .links
        .iter()
        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
        .collect();
    assert_eq!(links, [(delivery.trace_id(), delivery.span_id())]);
}
