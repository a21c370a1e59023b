//! First delivery, exact replay, release on failure, fingerprint reuse,
//! routing and body limits — against a real Redis and a real upstream.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn first_delivery_forwarded_then_replayed_exactly() {
    let (_redis, upstream, gate) = redis_gate("").await;
    let body = payment("p-1");

    let first = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.replayed(), Some("false"));

    // The sender retries later with a fresh timestamp and signature.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.replayed(), Some("true"));
    assert_eq!(retry.body, first.body, "replay must be byte-identical");
    for header in ["content-type", "x-upstream-call", "date"] {
        assert_eq!(retry.header(header), first.header(header), "{header}");
    }
    // A replay says how old its answer is (RFC 9111 Age); a live one not.
    assert_eq!(first.header("age"), None);
    let age: u64 = retry
        .header("age")
        .expect("Age on a replay")
        .parse()
        .unwrap();
    assert!((1..=10).contains(&age), "Age {age}");
    assert_eq!(upstream.calls(), 1);
    assert_eq!(upstream.bodies()[0], body.as_bytes());
    gate.stop().await;
}

#[tokio::test]
async fn upstream_500_is_passed_through_and_released() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|n, _| Reply::status(if n == 0 { 500 } else { 201 })).await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let body = payment("p-500");

    let failed = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(
        failed.status, 500,
        "the upstream's own 500 is passed through"
    );
    assert_eq!(failed.replayed(), Some("false"));
    assert!(redis.keys("idemgate:pay:*").is_empty(), "claim released");

    let second = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(second.status, 201);
    assert_eq!(
        second.replayed(),
        Some("false"),
        "forwarded as a first delivery"
    );

    let third = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(third.status, 201);
    assert_eq!(third.replayed(), Some("true"));
    assert_eq!(third.body, second.body);
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test]
async fn refused_upstream_releases_the_claim() {
    let redis = RedisServer::start();
    let dead = format!("http://127.0.0.1:{}", free_port());
    let gate = Gate::start(&config_text(&redis_store(&redis), &dead, "")).await;
    let answer = deliver(&gate.url("/notify"), &payment("p-refused")).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.reason().as_deref(), Some("upstream_error"));
    assert_eq!(
        answer.header("content-type"),
        Some("application/problem+json")
    );
    assert!(
        redis.keys("idemgate:pay:*").is_empty(),
        "nothing was sent: released"
    );
    gate.stop().await;
}

#[tokio::test]
async fn same_key_different_body_is_422_even_while_in_flight() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(800))).await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let url = gate.url("/notify");
    let original = payment("p-422");
    let altered = original.replace("10.00", "99.00");

    let first = tokio::spawn({
        let (url, body) = (url.clone(), original.clone());
        async move { deliver(&url, &body).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let during = deliver(&url, &altered).await;
    assert_eq!(during.status, 422);
    assert_eq!(during.reason().as_deref(), Some("fingerprint_mismatch"));

    assert_eq!(first.await.unwrap().status, 200);
    let after = deliver(&url, &altered).await;
    assert_eq!(after.status, 422);
    assert_eq!(after.reason().as_deref(), Some("fingerprint_mismatch"));
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test]
async fn key_and_body_errors_are_400_without_store_access() {
    let (redis, upstream, gate) = redis_gate("").await;
    let store = redis.watch_data();
    let missing = deliver(&gate.url("/notify"), r#"{"amount":"1"}"#).await;
    assert_eq!(
        (missing.status, missing.reason().as_deref()),
        (400, Some("key_missing"))
    );
    let empty = deliver(&gate.url("/notify"), r#"{"id":""}"#).await;
    assert_eq!(
        (empty.status, empty.reason().as_deref()),
        (400, Some("key_invalid"))
    );
    let garbage = deliver(&gate.url("/notify"), "not json").await;
    assert_eq!(
        (garbage.status, garbage.reason().as_deref()),
        (400, Some("bad_request_body"))
    );
    assert_eq!(store.commands(), Vec::<String>::new(), "no store access");
    assert_eq!(upstream.calls(), 0);
    gate.stop().await;
}

#[tokio::test]
async fn oversized_body_is_413() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "")
        .replace("[limits]", "[limits]\nmax_body_bytes = 64");
    let gate = Gate::start(&text).await;
    let body = format!(r#"{{"id":"big","pad":"{}"}}"#, "x".repeat(100));
    let answer = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.reason().as_deref(), Some("body_too_large"));
    assert_eq!(upstream.calls(), 0);
    gate.stop().await;
}

#[tokio::test]
async fn unmatched_requests_pass_through_or_404() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let gate = Gate::start(&text).await;
    // No signature, no key: untouched and not deduplicated.
    for _ in 0..2 {
        let answer = send("POST", &gate.url("/other"), &[], "x").await;
        assert_eq!(answer.status, 200);
    }
    let get = send("GET", &gate.url("/notify"), &[], "").await;
    assert_eq!(get.status, 200, "methods are part of the route match");
    assert_eq!(upstream.calls(), 3);
    gate.stop().await;

    let gate = Gate::start(&format!("unmatched = \"reject\"\n{text}")).await;
    let answer = send("POST", &gate.url("/other"), &[], "x").await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.reason().as_deref(), Some("route_not_found"));
    assert_eq!(upstream.calls(), 3);
    gate.stop().await;
}

#[tokio::test]
async fn shadow_mode_forwards_everything_but_records() {
    let (redis, upstream, gate) = redis_gate("mode = \"shadow\"").await;
    let body = payment("p-shadow");
    for _ in 0..3 {
        let answer = deliver(&gate.url("/notify"), &body).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.replayed(), Some("false"));
    }
    let forged = send(
        "POST",
        &gate.url("/notify"),
        &signed_with("wrong", now_secs(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(forged.status, 200, "shadow mode does not refuse");
    assert_eq!(upstream.calls(), 4);
    assert_eq!(
        redis.keys("idemgate:pay:*").len(),
        1,
        "the first delivery was recorded"
    );
    gate.stop().await;
}

/// A backend that writes an answer's head and body in two sends with
/// Nagle's algorithm on (as Python's `http.server` does), so the body waits
/// until the head is acknowledged. Serves keep-alive HTTP/1.1 until the
/// peer closes.
async fn serve_head_then_body(listener: tokio::net::TcpListener) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut conn, _)) = listener.accept().await {
        conn.set_nodelay(false).unwrap();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let head_end = loop {
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break end + 4;
                    }
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .map_or(0, |value| value.trim().parse().unwrap());
                while buf.len() < head_end + length {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..head_end + length);
                let body = b"{\"shipped\":true}";
                let answer_head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                if conn.write_all(answer_head.as_bytes()).await.is_err()
                    || conn.write_all(body).await.is_err()
                {
                    return;
                }
            }
        });
    }
}

/// On a kept-alive upstream connection Linux delays its ACKs (up to 40 ms),
/// so a backend like the one above answered every first delivery ~44 ms
/// late; idemgate re-arms TCP_QUICKACK after each request it writes. The
/// stall is a kernel timer, not load: with it every delivery takes ~40 ms
/// or more, without it most take a few ms and only load delays some, so
/// the fastest quarter of a dozen is under 20 ms exactly when there is no
/// stall.
#[tokio::test]
async fn a_backend_writing_head_and_body_apart_is_not_stalled_by_delayed_acks() {
    let redis = RedisServer::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve_head_then_body(listener));
    let gate = Gate::start(&config_text(&redis_store(&redis), &backend, "")).await;

    let mut took = Vec::new();
    for n in 0..12 {
        let started = std::time::Instant::now();
        let answer = deliver(&gate.url("/notify"), &payment(&format!("ack-{n}"))).await;
        took.push(started.elapsed());
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body.as_ref(), b"{\"shipped\":true}");
    }
    took.sort();
    // A stall delays every delivery by the kernel's timer; load only adds
    // to some. The fastest quarter tells the two apart on a busy machine.
    let quartile = took[took.len() / 4];
    println!("first deliveries through a head-then-body backend: {took:?}");
    assert!(
        quartile < Duration::from_millis(20),
        "the fastest quarter of first deliveries took {quartile:?} or more: a delayed-ACK stall (all: {took:?})"
    );
    gate.stop().await;
}
