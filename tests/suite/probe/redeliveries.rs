//! Inbox redeliveries whose outcome is unknown are probed like first
//! deliveries on a route with both `[route.inbox]` and `[route.probe]`:
//! applied → delivered (booked, never sent again), not applied → queued
//! again and delivered once. A real handler and Redis, and the embedded
//! store once.

use super::*;

/// The first delivery gets 503 (queued, acknowledged); the first
/// redelivery hangs past the 500 ms timeout, having applied it
/// (`applies`) or not; later deliveries are applied at once. A probe says
/// PAID once anything was applied, 404 before.
async fn redelivery_handler(applies: bool) -> (Upstream, Arc<Handler>) {
    let state = Arc::new(Handler::default());
    let seen = Arc::clone(&state);
    let upstream = Upstream::scripted(move |_, body: &Bytes| {
        if body.is_empty() {
            seen.probes.lock().unwrap().push(Instant::now());
            return if seen.applied.lock().unwrap().is_empty() {
                Reply::status(404)
            } else {
                Reply::with_body(Bytes::from_static(br#"{"state":"PAID"}"#))
            };
        }
        let n = {
            let mut deliveries = seen.deliveries.lock().unwrap();
            deliveries.push(Instant::now());
            deliveries.len()
        };
        match n {
            1 => Reply::status(503),
            2 => {
                if applies {
                    seen.applied.lock().unwrap().insert(id_of(body));
                }
                Reply::slow(Duration::from_secs(2))
            }
            _ => {
                seen.applied.lock().unwrap().insert(id_of(body));
                Reply::ok()
            }
        }
    })
    .await;
    (upstream, state)
}

const TOKEN: &str = "probe-inbox-token";

fn inbox_config(store: &str, upstream: &Upstream) -> String {
    let text = config(store, upstream).replace(
        "answer = \"probe\"\n",
        "answer = \"probe\"\n\n[route.inbox]\nbackoff = \"100ms\"\nmax_backoff = \"200ms\"\n",
    );
    format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n")
}

/// The inbox's view of delivery `id`, once its state is `want` (at most
/// `limit`).
async fn delivery_until(gate: &Gate, id: &str, want: &str, limit: Duration) -> serde_json::Value {
    let auth = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let url = format!("http://{}/admin/inbox/pay/delivery?key={id}", gate.admin);
    let started = Instant::now();
    loop {
        let answer = send("GET", &url, &auth, "").await;
        let view: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        if view["state"] == want || started.elapsed() > limit {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn applied_redelivery_is_delivered(store: &str) {
    let (upstream, handler) = redelivery_handler(true).await;
    let gate = Gate::start(&inbox_config(store, &upstream)).await;
    let acked = deliver(&gate.url("/notify"), &payment("redelivery-1")).await;
    assert_eq!(acked.status, 200, "acknowledged: {acked:?}");
    let view = delivery_until(&gate, "redelivery-1", "delivered", Duration::from_secs(8)).await;
    assert_eq!(view["state"], "delivered", "{view}");
    // Two calls: the failed first delivery and the redelivery that
    // applied it; the probe settled it, nothing was sent a third time.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(handler.deliveries.lock().unwrap().len(), 2);
    assert_eq!(handler.probes.lock().unwrap().len(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_redelivery_the_handler_applied_is_delivered_on_redis() {
    let redis = RedisServer::start();
    applied_redelivery_is_delivered(&redis_store(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_redelivery_the_handler_applied_is_delivered_on_the_embedded_store() {
    let (_dir, store) = temp_embedded_store();
    applied_redelivery_is_delivered(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_redelivery_never_applied_is_sent_again_once() {
    let (upstream, handler) = redelivery_handler(false).await;
    let redis = RedisServer::start();
    let gate = Gate::start(&inbox_config(&redis_store(&redis), &upstream)).await;
    let acked = deliver(&gate.url("/notify"), &payment("redelivery-2")).await;
    assert_eq!(acked.status, 200, "acknowledged: {acked:?}");
    let view = delivery_until(&gate, "redelivery-2", "delivered", Duration::from_secs(8)).await;
    assert_eq!(view["state"], "delivered", "{view}");
    assert_eq!(handler.applied.lock().unwrap().len(), 1, "applied once");
    assert_eq!(handler.probes.lock().unwrap().len(), 1);
    assert_eq!(handler.deliveries.lock().unwrap().len(), 3);
    gate.stop().await;
}
