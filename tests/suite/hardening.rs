//! Hostile input and resource pressure: request smuggling, slow clients,
//! floods of copies, oversized heads, connection caps, corrupted records.
//! Figures (latencies, RSS) are printed, not asserted against time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Writes raw bytes on a fresh connection and returns what came back and
/// whether the server closed the connection within 2 s.
async fn raw_exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> (String, bool) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut answer))
        .await
        .is_ok();
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

fn status_of(answer: &str) -> Option<u16> {
    answer.split(' ').nth(1)?.parse().ok()
}

fn signed_head(body: &str, extra: &str) -> String {
    let signature: String = signed(body)
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    format!("POST /notify HTTP/1.1\r\nhost: x\r\n{signature}{extra}")
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "the rank is between 1 and the sample count"
)]
fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[index]
}

fn limits(text: &str, lines: &str) -> String {
    text.replace("[limits]", &format!("[limits]\n{lines}"))
}

#[tokio::test]
async fn smuggling_vectors_are_refused_and_reach_nothing() {
    let (_redis, upstream, gate) = redis_gate("").await;
    let body = payment("p-smuggle");
    let n = body.len();
    let vectors: Vec<(&str, String)> = vec![
        (
            "two different Content-Lengths",
            format!(
                "{}content-length: {n}\r\ncontent-length: {}\r\n\r\n{body}",
                signed_head(&body, ""),
                n + 1
            ),
        ),
        (
            "Content-Length list",
            format!(
                "{}content-length: {n}, {n}\r\n\r\n{body}",
                signed_head(&body, "")
            ),
        ),
        (
            "Transfer-Encoding not ending in chunked",
            format!(
                "{}transfer-encoding: chunked, identity\r\n\r\n{n:x}\r\n{body}\r\n0\r\n\r\n",
                signed_head(&body, "")
            ),
        ),
        (
            "obfuscated Transfer-Encoding",
            format!(
                "{}transfer-encoding: xchunked\r\n\r\n{n:x}\r\n{body}\r\n0\r\n\r\n",
                signed_head(&body, "")
            ),
        ),
        (
            "Transfer-Encoding on HTTP/1.0",
            format!(
                "{}transfer-encoding: chunked\r\n\r\n{n:x}\r\n{body}\r\n0\r\n\r\n",
                signed_head(&body, "").replace("HTTP/1.1", "HTTP/1.0")
            ),
        ),
        (
            "obs-fold",
            format!(
                "{}x-folded: a\r\n b\r\ncontent-length: {n}\r\n\r\n{body}",
                signed_head(&body, "")
            ),
        ),
        (
            "NUL in a header value",
            format!(
                "{}x-bad: a\0b\r\ncontent-length: {n}\r\n\r\n{body}",
                signed_head(&body, "")
            ),
        ),
        (
            "space before the colon",
            format!(
                "{}content-length : {n}\r\n\r\n{body}",
                signed_head(&body, "")
            ),
        ),
        (
            "negative Content-Length",
            format!("{}content-length: -1\r\n\r\n{body}", signed_head(&body, "")),
        ),
        (
            "control byte in a header name",
            format!(
                "{}x-b\u{1}d: 1\r\ncontent-length: {n}\r\n\r\n{body}",
                signed_head(&body, "")
            ),
        ),
    ];
    for (name, request) in vectors {
        let (answer, _) = raw_exchange(gate.addr, request.as_bytes()).await;
        assert_eq!(status_of(&answer), Some(400), "{name}: {answer:?}");
    }
    assert_eq!(upstream.calls(), 0, "nothing reached the upstream");
    gate.stop().await;
}

/// Where hyper (per RFC 9112 §6.3 and RFC 9110 §8.6) resolves ambiguous
/// framing instead of refusing it, idemgate forwards a re-framed request:
/// the body it decoded, with its own Content-Length, and closes the
/// sender's connection after a Transfer-Encoding + Content-Length request,
/// so nothing can be smuggled behind it.
#[tokio::test]
async fn ambiguous_framing_is_resolved_and_reframed() {
    let (_redis, upstream, gate) = redis_gate("").await;
    let smuggled = "GET /admin HTTP/1.1\r\nhost: x\r\n\r\n";
    for (i, order) in ["cl-te", "te-cl"].into_iter().enumerate() {
        let body = payment(&format!("p-frame-{i}"));
        let n = body.len();
        let (first, second) = (
            format!("content-length: {}\r\n", n + smuggled.len()),
            "transfer-encoding: chunked\r\n",
        );
        let framing = if order == "cl-te" {
            format!("{first}{second}")
        } else {
            format!("{second}{first}")
        };
        let request = format!(
            "{}{framing}\r\n{n:x}\r\n{body}\r\n0\r\n\r\n{smuggled}",
            signed_head(&body, "")
        );
        let (answer, closed) = raw_exchange(gate.addr, request.as_bytes()).await;
        assert_eq!(status_of(&answer), Some(200), "{order}: {answer}");
        assert!(
            closed,
            "{order}: the connection is closed after the ambiguous request"
        );
        assert_eq!(
            answer.matches("HTTP/1.1").count(),
            1,
            "{order}: the smuggled request was not served"
        );
        assert_eq!(
            upstream.bodies().last().unwrap(),
            body.as_bytes(),
            "{order}: upstream got the decoded body"
        );
    }
    let body = payment("p-frame-dup");
    let n = body.len();
    let request = format!(
        "{}content-length: {n}\r\ncontent-length: {n}\r\n\r\n{body}",
        signed_head(&body, "")
    );
    let (answer, _) = raw_exchange(gate.addr, request.as_bytes()).await;
    assert_eq!(
        status_of(&answer),
        Some(200),
        "identical duplicates are one length"
    );
    assert_eq!(upstream.calls(), 3);
    gate.stop().await;
}

#[tokio::test]
async fn oversized_heads_slow_bodies_and_idle_connections_are_cut() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = limits(
        &config_text(&redis_store(&redis), &upstream.url(), ""),
        "max_headers = 20\nmax_header_bytes = 8192\nheader_read_timeout = \"1s\"\nbody_read_timeout = \"500ms\"",
    );
    let gate = Gate::start(&text).await;
    let body = payment("p-limits");

    let many: String = (0..30).map(|i| format!("x-h{i}: v\r\n")).collect();
    let (answer, _) = raw_exchange(
        gate.addr,
        format!(
            "{}{many}content-length: {}\r\n\r\n{body}",
            signed_head(&body, ""),
            body.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        status_of(&answer),
        Some(431),
        "too many header fields: {answer}"
    );
    let big = format!("x-big: {}\r\n", "a".repeat(9000));
    let (answer, _) = raw_exchange(
        gate.addr,
        format!(
            "{}{big}content-length: {}\r\n\r\n{body}",
            signed_head(&body, ""),
            body.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(status_of(&answer), Some(431), "head too large: {answer}");

    // Slow body: headers complete, body never finishes.
    let mut stream = tokio::net::TcpStream::connect(gate.addr).await.unwrap();
    let head = format!(
        "{}content-length: {}\r\n\r\n",
        signed_head(&body, ""),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..5]).await.unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status_of(&answer), Some(408), "{answer}");
    assert!(answer.contains("body_timeout"));
    println!("slow body answered 408 after {:?}", started.elapsed());

    // An idle keep-alive connection is closed after header_read_timeout.
    let mut stream = tokio::net::TcpStream::connect(gate.addr).await.unwrap();
    let request = format!(
        "{}content-length: {}\r\n\r\n{body}",
        signed_head(&body, ""),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), Some(200));
    let idle = Instant::now();
    let rest = tokio::time::timeout(Duration::from_secs(4), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(rest.is_ok(), "idle connection not closed");
    println!(
        "idle keep-alive connection closed after {:?}",
        idle.elapsed()
    );
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = limits(
        &config_text(&redis_store(&redis), &upstream.url(), ""),
        "max_connections = 2",
    );
    let gate = Gate::start(&text).await;
    let holders: Vec<_> = futures_hold(gate.addr, 2).await;
    let url = gate.url("/notify");
    let waiting = tokio::spawn(async move { deliver(&url, &payment("p-cap")).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a third connection is not served while two are open"
    );
    drop(holders);
    let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once a slot frees")
        .unwrap();
    assert_eq!(answer.status, 200);
    gate.stop().await;
}

async fn futures_hold(addr: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A started request head keeps the connection busy.
        stream
            .write_all(b"POST /notify HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_does_not_starve_deliveries() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = limits(
        &config_text(&redis_store(&redis), &upstream.url(), ""),
        "header_read_timeout = \"2s\"",
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");

    let mut baseline = Vec::new();
    for i in 0..200 {
        let started = Instant::now();
        assert_eq!(
            deliver(&url, &payment(&format!("p-base-{i}"))).await.status,
            200
        );
        baseline.push(started.elapsed());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let attack_until = Instant::now() + Duration::from_secs(8);
    let attackers: Vec<_> = (0..200)
        .map(|_| {
            let (addr, stop) = (gate.addr, Arc::clone(&stop));
            tokio::spawn(async move {
                let mut lifetimes = Vec::new();
                while !stop.load(Ordering::Relaxed) && Instant::now() < attack_until {
                    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
                        break;
                    };
                    let opened = Instant::now();
                    for byte in b"POST /notify HTTP/1.1\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                        .iter()
                        .cycle()
                    {
                        if stop.load(Ordering::Relaxed) || Instant::now() >= attack_until {
                            return lifetimes;
                        }
                        if stream.write_all(&[*byte]).await.is_err() {
                            break;
                        }
                        let mut probe = [0u8; 256];
                        let read =
                            tokio::time::timeout(Duration::from_secs(1), stream.read(&mut probe));
                        if let Ok(Ok(0) | Err(_)) = read.await {
                            break;
                        }
                    }
                    lifetimes.push(opened.elapsed());
                }
                lifetimes
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut attacked = Vec::new();
    for i in 0..200 {
        let started = Instant::now();
        assert_eq!(
            deliver(&url, &payment(&format!("p-attack-{i}")))
                .await
                .status,
            200,
            "served during the attack"
        );
        attacked.push(started.elapsed());
    }
    let mut lifetimes = Vec::new();
    for attacker in attackers {
        lifetimes.extend(attacker.await.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    assert!(
        !lifetimes.is_empty(),
        "slow connections were cut and reopened"
    );
    let longest = lifetimes.iter().max().copied().unwrap_or_default();
    assert!(
        longest < Duration::from_secs(4),
        "slow connections closed after header_read_timeout (longest {longest:?})"
    );
    println!(
        "slowloris: 200 slow connections; deliveries p50/p99 without {:?}/{:?}, during {:?}/{:?}; {} slow connections cut, longest lived {:?}",
        percentile(&mut baseline, 0.5),
        percentile(&mut baseline, 0.99),
        percentile(&mut attacked, 0.5),
        percentile(&mut attacked, 0.99),
        lifetimes.len(),
        longest
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_copies_is_bounded_and_executed_once() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_secs(1))).await;
    // A generous store timeout: this test is about memory and exactly-once
    // under a flood, not about a store slowed down by a loaded machine.
    let text = config_text(&redis_store_timing_out(&redis, "2s"), &upstream.url(), "");
    let gate = GateProcess::start(&text);
    let rss_before = peak_rss_kib(gate.pid());
    let url = gate.url("/notify");
    let body = payment("p-flood");
    let copies: Vec<_> = (0..1000)
        .map(|_| {
            let (url, body) = (url.clone(), body.clone());
            tokio::spawn(async move { deliver(&url, &body).await })
        })
        .collect();
    let (mut ok, mut refused, mut unavailable) = (0, 0, 0);
    for copy in copies {
        let answer = copy.await.unwrap();
        match (answer.status, answer.reason().as_deref()) {
            (200, _) => ok += 1,
            (409, Some("in_flight")) => refused += 1,
            // Fail closed if the store itself falls behind, and one address
            // holds at most its share of the connections: still answers.
            (503, Some("store_unavailable" | "over_capacity")) => unavailable += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    let rss_peak = peak_rss_kib(gate.pid());
    println!(
        "flood: 1000 copies → {ok} × 200, {refused} × 409 in_flight, {unavailable} × 503 (store or over capacity); peak RSS {rss_before} KiB before, {rss_peak} KiB after"
    );
    assert_eq!(upstream.calls(), 1, "exactly one execution");
    assert_eq!(ok + refused + unavailable, 1000, "every copy answered");
    assert!(
        ok >= 2 && refused >= 1,
        "waiting copies replayed, the rest refused"
    );
    assert!(rss_peak < 256 * 1024, "peak RSS {rss_peak} KiB");
}

#[tokio::test]
async fn a_corrupted_record_is_an_unknown_outcome_not_a_free_key() {
    let (redis, upstream, gate) = redis_gate("").await;
    let body = payment("p-corrupt");
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 200);
    let keys = redis.keys("idemgate:pay:*");
    assert_eq!(keys.len(), 1);
    redis.cli(&["SET", &keys[0], "\u{9}garbage from a future version"]);
    let answer = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(answer.status, 409);
    assert_eq!(answer.reason().as_deref(), Some("outcome_unknown"));
    assert!(answer.header("retry-after").is_some());
    assert_eq!(upstream.calls(), 1, "not re-executed");
    gate.stop().await;
}

/// A WeChat Pay v2 style route: unsigned, keyed on an XML element.
fn xml_route(store: &str, upstream: &str) -> String {
    format!(
        r#"{}
[[route]]
name = "wechat"
path_prefix = "/notify"

[route.signature]
scheme = "none"

[route.idempotency]
key = ["xml:/xml/out_trade_no"]
retention = "1h"
"#,
        base_sections(store, upstream)
    )
}

#[tokio::test]
async fn xml_bodies_are_keyed_by_element_and_dtds_never_reach_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&xml_route(
        &embedded_store(&dir.path().join("xml.redb")),
        &upstream.url(),
    ))
    .await;
    let url = gate.url("/notify");
    let xml = [("content-type".to_owned(), "text/xml".to_owned())];
    let body = "<xml><appid><![CDATA[wx2421b1c4370ec43b]]></appid>\
                <out_trade_no><![CDATA[1409811653]]></out_trade_no>\
                <total_fee>1</total_fee></xml>";

    let first = send("POST", &url, &xml, body).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    let again = send("POST", &url, &xml, body).await;
    assert_eq!((again.status, again.replayed()), (200, Some("true")));
    assert_eq!(upstream.calls(), 1);

    let xxe = r#"<?xml version="1.0"?>
<!DOCTYPE xml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<xml><out_trade_no>&xxe;</out_trade_no><total_fee>1</total_fee></xml>"#;
    let mut laughs =
        String::from("<?xml version=\"1.0\"?>\n<!DOCTYPE xml [\n<!ENTITY l0 \"lol\">\n");
    for i in 1..10 {
        let refs = format!("&l{};", i - 1).repeat(10);
        laughs.push_str(&format!("<!ENTITY l{i} \"{refs}\">\n"));
    }
    laughs.push_str("]>\n<xml><out_trade_no>&l9;</out_trade_no></xml>");
    let undeclared = "<xml><out_trade_no>&xxe;</out_trade_no></xml>".to_owned();
    for (name, hostile) in [
        ("XXE", xxe.to_owned()),
        ("billion laughs", laughs),
        ("entity", undeclared),
    ] {
        let refused = send("POST", &url, &xml, hostile).await;
        assert_eq!(
            (refused.status, refused.reason().as_deref()),
            (400, Some("bad_request_body")),
            "{name}: {refused:?}"
        );
        assert_eq!(
            refused.header("content-type"),
            Some("application/problem+json"),
            "{name}"
        );
        assert_eq!(refused.replayed(), None, "{name}");
    }
    assert_eq!(upstream.calls(), 1, "no hostile body reached the upstream");
    gate.stop().await;
}
