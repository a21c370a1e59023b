//! Failure handling of docs/contract.md §4: hang-ups, timeouts, crashes,
//! store outages and shutdown — with real Redis, real upstream and the real
//! binary.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_hanging_up_does_not_cancel_the_work() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_secs(1))).await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let body = payment("p-hangup");

    let stream = write_raw_delivery(gate.addr, &body).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(stream);

    assert!(eventually(Duration::from_secs(3), || upstream.calls() == 1).await);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(retry.status, 200);
    assert_eq!(
        retry.replayed(),
        Some("true"),
        "the answer was stored after the hang-up"
    );
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_timeout_holds_the_outcome_as_unknown() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "unknown_hold = \"1s\"",
    )
    .replace("timeout = \"5s\"", "timeout = \"300ms\"");
    let gate = Gate::start(&text).await;
    let url = gate.url("/notify");
    let body = payment("p-timeout");

    let first = deliver(&url, &body).await;
    assert_eq!(first.status, 504);
    assert_eq!(first.reason().as_deref(), Some("upstream_timeout"));

    let retry = deliver(&url, &body).await;
    assert_eq!(retry.status, 409);
    assert_eq!(retry.reason().as_deref(), Some("outcome_unknown"));
    assert!(retry.header("retry-after").is_some());
    assert_eq!(upstream.calls(), 1, "no second execution while unknown");

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after_hold = deliver(&url, &body).await;
    assert_eq!(after_hold.status, 200);
    assert_eq!(
        after_hold.replayed(),
        Some("false"),
        "forwarded again after the hold"
    );
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instance_leaves_an_unknown_outcome() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(5)).await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "lease = \"500ms\"\nunknown_hold = \"2s\"\non_in_flight = \"conflict\"",
    );
    let mut doomed = GateProcess::start(&text);
    let survivor = GateProcess::start(&text);
    let body = payment("p-crash");

    let in_flight = tokio::spawn({
        let (addr, body) = (doomed.addr, body.clone());
        async move {
            // The sender waits for an answer that never comes.
            let mut stream = write_raw_delivery(addr, &body).await;
            let mut sink = Vec::new();
            let read = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut sink);
            let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
        }
    });
    assert!(eventually(Duration::from_secs(5), || upstream.calls() == 1).await);
    doomed.kill();
    let killed_at = std::time::Instant::now();
    let _ = in_flight.await;

    // Before the lease runs out the claim still looks alive …
    let early = deliver(&survivor.url("/notify"), &body).await;
    assert_eq!(early.status, 409);
    // … after it, the outcome is unknown and stays blocked for the hold.
    tokio::time::sleep(Duration::from_millis(700).saturating_sub(killed_at.elapsed())).await;
    let retry = deliver(&survivor.url("/notify"), &body).await;
    assert_eq!(retry.status, 409);
    assert_eq!(retry.reason().as_deref(), Some("outcome_unknown"));
    assert_eq!(upstream.calls(), 1, "never re-executed during the hold");

    assert!(
        eventually(Duration::from_secs(4), || std::net::TcpStream::connect(
            survivor.addr
        )
        .is_ok())
        .await
    );
    tokio::time::sleep(Duration::from_millis(2600).saturating_sub(killed_at.elapsed())).await;
    let after = deliver(&survivor.url("/notify"), &body).await;
    assert_eq!(after.status, 200, "forwarded again once the hold ended");
    assert_eq!(upstream.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outage_fails_closed_or_open_and_recovers() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let closed = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let open = Gate::start(
        &config_text(
            &redis_store(&redis),
            &upstream.url(),
            "on_unavailable = \"forward\"",
        )
        .replace("name = \"pay\"", "name = \"pay-open\""),
    )
    .await;

    redis.stop();
    let refused = deliver(&closed.url("/notify"), &payment("p-outage")).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.reason().as_deref(), Some("store_unavailable"));
    assert!(refused.header("retry-after").is_some());
    assert_eq!(upstream.calls(), 0, "nothing forwarded without the store");

    let unprotected = deliver(&open.url("/notify"), &payment("p-outage")).await;
    assert_eq!(unprotected.status, 200, "fail-open forwards");
    assert_eq!(upstream.calls(), 1);

    redis.restart();
    let body = payment("p-after");
    let mut first = None;
    for _ in 0..100 {
        let answer = deliver(&closed.url("/notify"), &body).await;
        if answer.status == 200 {
            first = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = first.expect("protection resumes after Redis returns, without a restart");
    assert_eq!(first.replayed(), Some("false"));
    let again = deliver(&closed.url("/notify"), &body).await;
    assert_eq!(again.replayed(), Some("true"), "{again:?}");
    assert_eq!(upstream.calls(), 2);
    closed.stop().await;
    open.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_work_and_stores_it() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(800))).await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let gate = Gate::start(&text).await;
    let body = payment("p-shutdown");
    let in_flight = tokio::spawn({
        let (url, body) = (gate.url("/notify"), body.clone());
        async move { deliver(&url, &body).await }
    });
    assert!(eventually(Duration::from_secs(2), || upstream.calls() == 1).await);
    gate.stop().await;
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 200, "the in-flight request was answered");

    let next = Gate::start(&text).await;
    let replay = deliver(&next.url("/notify"), &body).await;
    assert_eq!(
        replay.replayed(),
        Some("true"),
        "its answer was stored before exit"
    );
    assert_eq!(upstream.calls(), 1);
    next.stop().await;
}

#[tokio::test]
async fn sigterm_exits_cleanly() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let mut process = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let answer = deliver(&process.url("/notify"), &payment("p-term")).await;
    assert_eq!(answer.status, 200);
    let status = process.terminate();
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_stored_even_if_the_store_blinks_while_the_upstream_works() {
    let mut redis = RedisServer::start_persistent();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(1000))).await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let body = payment("p-blink");
    let first = tokio::spawn({
        let (url, body) = (gate.url("/notify"), body.clone());
        async move { deliver(&url, &body).await }
    });
    assert!(eventually(Duration::from_secs(2), || upstream.calls() == 1).await);
    redis.stop();
    // The upstream answers while Redis is down; storing the answer fails
    // and is retried until Redis (with its AOF) is back.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    redis.restart();
    assert_eq!(first.await.unwrap().status, 200);
    let mut replayed = None;
    for _ in 0..40 {
        let retry = deliver(&gate.url("/notify"), &body).await;
        if retry.status == 200 {
            replayed = Some(retry);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = replayed.expect("the retry is answered once Redis is back");
    assert_eq!(retry.replayed(), Some("true"), "{retry:?}");
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

/// A claim whose reply nobody reads — the sender hung up while it was out,
/// or the reply timed out — must not leave the key blocked: idemgate
/// releases it (owner-checked) once Redis runs it. `CLIENT PAUSE WRITE`
/// holds the claim inside Redis long enough to hang up or time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_whose_reply_was_abandoned_are_released() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let patient = config_text(&redis_store_timing_out(&redis, "5s"), &upstream.url(), "");
    let gate = Gate::start(&patient).await;
    let body = payment("p-abandoned");

    redis.cli(&["CLIENT", "PAUSE", "700", "WRITE"]);
    let stream = write_raw_delivery(gate.addr, &body).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(stream);
    let gone = eventually(Duration::from_secs(3), || {
        redis.keys("idemgate:pay:*").is_empty()
    })
    .await;
    assert!(gone, "the hung-up sender's claim was released");
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;

    // Same with a 250 ms store timeout: the sender gets a 503, and the
    // claim that lands after the timeout is released too.
    let text = config_text(&redis_store_timing_out(&redis, "250ms"), &upstream.url(), "");
    let gate = Gate::start(&text).await;
    let body = payment("p-timed-out");
    redis.cli(&["CLIENT", "PAUSE", "700", "WRITE"]);
    let answer = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(answer.reason().as_deref(), Some("store_unavailable"));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let gone = eventually(Duration::from_secs(5), || {
        redis.keys("idemgate:pay:*").len() <= 1
    })
    .await;
    assert!(gone, "only the first test's completed record remains");
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

/// A release that meets a store outage longer than the old five tries
/// (about 2.75 s, shorter than a Cluster failover) still frees the key once
/// the store is back: the next delivery is forwarded, not refused as in
/// flight or unknown for the lease and `unknown_hold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_outlasts_a_store_outage() {
    let mut redis = RedisServer::start_persistent();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "on_upstream_timeout = \"release\"",
    )
    .replace("timeout = \"5s\"", "timeout = \"500ms\"");
    let gate = Gate::start(&text).await;
    let body = payment("p-release-outage");
    let first = tokio::spawn({
        let (url, body) = (gate.url("/notify"), body.clone());
        async move { deliver(&url, &body).await }
    });
    assert!(eventually(Duration::from_secs(2), || upstream.calls() == 1).await);
    // The claim is on disk (AOF, fsync always); Redis dies before the
    // upstream times out, so the release meets the outage.
    redis.stop();
    let first = first.await.unwrap();
    assert_eq!(first.status, 504, "{first:?}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    redis.restart();
    let mut next = None;
    for _ in 0..40 {
        let answer = deliver(&gate.url("/notify"), &body).await;
        if answer.status != 503 {
            next = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next = next.expect("answered once Redis is back");
    assert_eq!(
        (next.status, next.replayed()),
        (200, Some("false")),
        "the released key is forwarded again: {next:?}"
    );
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}
