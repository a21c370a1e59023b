//! Must hold 4 (and 7 on the embedded store): a handler that always
//! fails. The delivery reaches dead after `max_attempts` redeliveries on
//! the backoff schedule (doubling, jitter within ±25%), and the operator's
//! retry sends it once more, exactly once.

use super::*;

/// First delay of the schedule under test.
const BACKOFF_MS: f64 = 400.0;
/// How late a worker may look at a due delivery: its poll interval plus a
/// margin for a loaded machine.
const LATE_MS: f64 = 600.0;

async fn dies_then_retries_once(store: &str) {
    // Calls 0..=3 (the live one and three redeliveries) fail; later ones succeed.
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    let handler = Upstream::scripted(move |n, _| {
        seen.lock().unwrap().push(Instant::now());
        if n <= 3 {
            Reply::status(503)
        } else {
            Reply::ok()
        }
    })
    .await;
    let text = inbox_config(
        store,
        &handler.url(),
        "backoff = \"400ms\"\nmax_backoff = \"10s\"\nmax_attempts = 3\nvisibility_timeout = \"10s\"",
    );
    let gate = GateProcess::start(&text);
    let first = Sender::new()
        .deliver(&gate.url("/notify"), &payment("doomed"))
        .await
        .unwrap();
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    assert_eq!(&first.body[..], ACK.as_bytes());

    let view = until_state(gate.admin, "doomed", "dead").await;
    assert_eq!(view["attempts"], 3, "{view}");
    assert_eq!(view["last_answer"]["status"], 503, "{view}");
    assert_eq!(view["last_error"], "handler answered 503", "{view}");
    assert_eq!(
        handler.calls(),
        4,
        "the live attempt and three redeliveries"
    );

    let times = arrivals.lock().unwrap().clone();
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect();
    println!("gaps between attempts (ms): {gaps:?}");
    for (attempt, gap) in gaps.iter().enumerate() {
        let planned = BACKOFF_MS * f64::from(1u32 << attempt);
        assert!(
            *gap >= planned * 0.75 - 50.0 && *gap <= planned * 1.25 + LATE_MS,
            "gap {attempt} is {gap:.0} ms; the schedule says {planned} ms ±25%"
        );
    }
    let dead = listed(gate.admin, "dead").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(listed(gate.admin, "queued").await.is_empty());

    // Retry-now: sent once, and delivered this time.
    // An action says the state it saw: without it, or with another, nothing happens.
    let (status, _) = admin(gate.admin, "POST", "/admin/inbox/pay/retry?key=doomed").await;
    assert_eq!(status, 400);
    let stale = "/admin/inbox/pay/drop?key=doomed&expect_state=queued";
    let (status, changed) = admin(gate.admin, "POST", stale).await;
    assert_eq!(
        (status, &changed["reason"]),
        (409, &"delivery_changed".into()),
        "{changed}"
    );
    assert_eq!(listed(gate.admin, "dead").await.len(), 1, "nothing dropped");
    let retry = "/admin/inbox/pay/retry?key=doomed&expect_state=dead";
    let (status, retried) = admin(gate.admin, "POST", retry).await;
    assert_eq!(status, 200, "{retried}");
    let view = until_state(gate.admin, "doomed", "delivered").await;
    assert_eq!(view["attempts"], 4, "{view}");
    assert_eq!(view["last_answer"]["status"], 200, "{view}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(handler.calls(), 5, "the retry sent it exactly once");
    // A delivered delivery is not retried again, and drop refuses it too.
    let (status, _) = admin(gate.admin, "POST", retry).await;
    assert_eq!(status, 409);
    let drop = "/admin/inbox/pay/drop?key=doomed&expect_state=dead";
    let (status, _) = admin(gate.admin, "POST", drop).await;
    assert_eq!(status, 409);
    assert!(listed(gate.admin, "dead").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_kills_the_delivery_on_schedule_and_retry_sends_it_once() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    dies_then_retries_once(&redis_store(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_kills_and_retries_the_same_way() {
    let _serial = SERIAL.lock().await;
    let (_dir, store) = temp_embedded_store();
    dies_then_retries_once(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_delivery_is_never_sent_and_its_copies_still_get_the_ack() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let (_port, url) = absent_handler();
    let text = inbox_config(
        &redis_store(&redis),
        &url,
        "backoff = \"30s\"\nmax_backoff = \"1m\"\nvisibility_timeout = \"10s\"",
    );
    let gate = GateProcess::start(&text);
    let first = Sender::new()
        .deliver(&gate.url("/notify"), &payment("unwanted"))
        .await
        .unwrap();
    assert_eq!(first.replayed(), Some("false"));
    let (status, dropped) = admin(
        gate.admin,
        "POST",
        "/admin/inbox/pay/drop?key=unwanted&expect_state=queued",
    )
    .await;
    assert_eq!(
        (status, &dropped["state"]),
        (200, &serde_json::json!("dropped")),
        "{dropped}"
    );
    assert!(listed(gate.admin, "queued").await.is_empty());
    let copy = Sender::new()
        .deliver(&gate.url("/notify"), &payment("unwanted"))
        .await
        .unwrap();
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));
    assert_eq!(&copy.body[..], ACK.as_bytes());
    let (status, _) = admin(gate.admin, "GET", "/admin/inbox/pay?state=sideways").await;
    assert_eq!(status, 400);
    let (status, _) = admin(gate.admin, "GET", "/admin/inbox/pay/delivery?key=nobody").await;
    assert_eq!(status, 404);
}
