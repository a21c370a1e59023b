//! Concurrent duplicates and lease renewal against a real Redis.

use std::time::Duration;

use crate::support::*;

/// A Redis-backed gate in front of an upstream that answers 200 after
/// `delay`, with `extra` in `[route.idempotency]`: time for duplicates to
/// meet the first delivery in flight.
async fn slow_gate(delay: Duration, extra: &str) -> (RedisServer, Upstream, Gate) {
    let upstream = Upstream::scripted(move |_, _| Reply::slow(delay)).await;
    redis_gate_for(upstream, extra).await
}

/// Starts delivering `body` to `url` as its own task: a delivery in flight
/// while the test sends its duplicates.
fn deliver_in_background(url: &str, body: &str) -> tokio::task::JoinHandle<Answer> {
    let (url, body) = (url.to_owned(), body.to_owned());
    tokio::spawn(async move { deliver(&url, &body).await })
}

async fn burst(url: &str, body: &str, copies: usize) -> Vec<Answer> {
    let tasks: Vec<_> = (0..copies)
        .map(|_| deliver_in_background(url, body))
        .collect();
    let mut answers = Vec::with_capacity(copies);
    for task in tasks {
        answers.push(task.await.expect("delivery task"));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_mode_gives_every_duplicate_the_same_answer() {
    let (_redis, upstream, gate) =
        slow_gate(Duration::from_millis(500), "on_in_flight = \"wait\"").await;

    let answers = burst(&gate.url("/notify"), &payment("p-burst"), 32).await;
    assert_eq!(upstream.calls(), 1, "exactly one execution");
    let first = &answers[0];
    for answer in &answers {
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, first.body);
    }
    let live = answers
        .iter()
        .filter(|a| a.replayed() == Some("false"))
        .count();
    assert_eq!(live, 1, "one live answer, 31 replays");
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_mode_refuses_duplicates_with_409() {
    let (_redis, upstream, gate) =
        slow_gate(Duration::from_millis(800), "on_in_flight = \"conflict\"").await;

    let answers = burst(&gate.url("/notify"), &payment("p-conflict"), 32).await;
    assert_eq!(upstream.calls(), 1);
    let ok = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(ok, 1);
    for answer in answers.iter().filter(|a| a.status != 200) {
        assert_eq!(answer.status, 409);
        assert_eq!(answer.reason().as_deref(), Some("in_flight"));
        assert!(answer.header("retry-after").is_some());
    }
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_timeout_ends_in_409() {
    let (_redis, upstream, gate) =
        slow_gate(Duration::from_millis(1500), "wait_timeout = \"300ms\"").await;
    let url = gate.url("/notify");
    let body = payment("p-wait");
    let first = deliver_in_background(&url, &body);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let waited = deliver(&url, &body).await;
    assert_eq!(waited.status, 409);
    assert_eq!(waited.reason().as_deref(), Some("in_flight"));
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_is_renewed_while_the_upstream_is_slow() {
    let (redis, upstream, gate) = slow_gate(
        Duration::from_secs(2),
        "lease = \"500ms\"\nunknown_hold = \"500ms\"\non_in_flight = \"conflict\"",
    )
    .await;
    let url = gate.url("/notify");
    let body = payment("p-renew");
    let first = deliver_in_background(&url, &body);
    // Without renewal the claim (500 ms lease + 500 ms hold) would be gone.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let duplicate = deliver(&url, &body).await;
    assert_eq!(duplicate.status, 409);
    assert_eq!(
        duplicate.reason().as_deref(),
        Some("in_flight"),
        "still a live claim"
    );
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(upstream.calls(), 1);
    assert!(
        redis.command_counts().get("evalsha").copied().unwrap_or(0) >= 4,
        "renewals ran"
    );
    gate.stop().await;
}

/// The binary on one thread (the default, current-thread scheduler) and on
/// four work-stealing threads: duplicates racing from many connections are
/// still executed once per key and answered alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_executes_each_key_once_on_one_or_many_threads() {
    for threads in [1, 4] {
        let redis = RedisServer::start();
        let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(100))).await;
        let text = config_text(
            &redis_store(&redis),
            &upstream.url(),
            "on_in_flight = \"wait\"",
        )
        .replace(
            "[limits]\n",
            &format!("[limits]\nworker_threads = {threads}\n"),
        );
        assert!(text.contains(&format!("worker_threads = {threads}")));
        let gate = GateProcess::start(&text);
        let tasks: Vec<_> = (0..160)
            .map(|i| {
                let (url, body) = (
                    gate.url("/notify"),
                    payment(&format!("p-threads-{}", i % 20)),
                );
                tokio::spawn(async move { deliver(&url, &body).await })
            })
            .collect();
        for task in tasks {
            assert_eq!(
                task.await.expect("delivery task").status,
                200,
                "{threads} threads"
            );
        }
        assert_eq!(
            upstream.calls(),
            20,
            "one execution per key on {threads} threads"
        );
    }
}
