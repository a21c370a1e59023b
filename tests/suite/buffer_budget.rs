//! `limits.max_buffered_bytes`: the bytes of request bodies held at once,
//! across every connection and HTTP/2 stream. Bodies that stall just short
//! of their end hold memory for `body_read_timeout`; beyond the budget the
//! next body gets 503 `over_capacity` with `Retry-After`, the handler sees
//! nothing, and the budget comes back when the stalled bodies go.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::*;

/// A body that sends `remaining` bytes in 64 KiB chunks and then neither
/// sends more nor ends: the shape of a body flood.
struct Stalling {
    remaining: usize,
}

impl Body for Stalling {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.remaining == 0 {
            // Never woken: the stream stays open with its bytes buffered.
            return Poll::Pending;
        }
        let chunk = self.remaining.min(64 * 1024);
        self.remaining -= chunk;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; chunk])))))
    }
}

/// A signed payment `id` padded to about `size` bytes.
fn padded_payment(id: &str, size: usize) -> String {
    format!(r#"{{"id":"{id}","pad":"{}"}}"#, "p".repeat(size))
}

#[tokio::test]
async fn stalled_bodies_beyond_the_budget_get_503_until_they_go() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "").replace(
        "[limits]",
        "[limits]\nmax_body_bytes = 65536\nmax_buffered_bytes = 262144\nbody_read_timeout = \"20s\"",
    );
    let gate = Gate::start(&text).await;
    // Four bodies of 64 KiB stall 5,536 bytes short: 240,000 bytes held.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(gate.addr).await.unwrap();
        let head = "POST /notify HTTP/1.1\r\nhost: x\r\ncontent-length: 65536\r\n\r\n";
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&[b'x'; 60_000]).await.unwrap();
        stalled.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let body = padded_payment("p-budget", 30_000);
    let refused = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.reason().as_deref(), Some("over_capacity"));
    assert_eq!(refused.header("retry-after"), Some("1"));
    let small = deliver(&gate.url("/notify"), &payment("p-small")).await;
    assert_eq!(small.status, 200, "a body that fits the rest is served");
    drop(stalled);
    let served = deliver_until_served(&gate.url("/notify"), &body, Duration::from_secs(5)).await;
    assert_eq!(
        served.status, 200,
        "the budget comes back when the bodies go"
    );
    assert_eq!(
        upstream.calls(),
        2,
        "the refused body never reached the handler"
    );
    gate.stop().await;
}

/// A signed delivery of `body` from `source`: its status (0: no answer).
async fn deliver_from(source: [u8; 4], addr: std::net::SocketAddr, body: &str) -> u16 {
    answer_from(source, addr, body).await.0
}

/// A signed delivery of `body` from `source`: its status (0: no answer)
/// and the whole answer as text.
async fn answer_from(source: [u8; 4], addr: std::net::SocketAddr, body: &str) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    let mut stream = connect_from(source, addr).await;
    let mut head = format!(
        "POST /notify HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in signed(body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_greedy_peer_can_not_take_the_budget_from_the_others() {
    let (_redis, _upstream, gate) = gate_with_limits(
        "max_body_bytes = 65536\nmax_buffered_bytes = 262144\nbody_read_timeout = \"20s\"",
    )
    .await;
    // 127.0.0.2 opens 8 connections and trickles 61,440 bytes of a 65,536
    // byte body on each, in 4 KiB writes: it asks for 491,520 bytes.
    let mut greedy = Vec::new();
    for _ in 0..8 {
        let mut stream = connect_from([127, 0, 0, 2], gate.addr).await;
        let head = "POST /notify HTTP/1.1\r\nhost: x\r\ncontent-length: 65536\r\n\r\n";
        stream.write_all(head.as_bytes()).await.unwrap();
        greedy.push(stream);
    }
    for _ in 0..15 {
        for stream in &mut greedy {
            // A refused body's connection is closed: its writes may fail.
            let _ = stream.write_all(&[b'x'; 4096]).await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 127.0.0.3 sends 20 deliveries of about 20 KB, one after another.
    let mut served = 0;
    for i in 0..20 {
        let body = padded_payment(&format!("p-fair-{i}"), 20_000);
        if deliver_from([127, 0, 0, 3], gate.addr, &body).await == 200 {
            served += 1;
        }
    }
    eprintln!("measured: one greedy peer (8 stalled bodies), honest peer served {served} of 20");
    assert_eq!(served, 20, "the honest peer keeps the quarter left to it");
    drop(greedy);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_can_not_take_every_connection() {
    let (_redis, _upstream, gate) =
        gate_with_limits("max_connections = 8\nheader_read_timeout = \"20s\"").await;
    // 127.0.0.2 opens every connection idemgate takes and sends nothing.
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(connect_from([127, 0, 0, 2], gate.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = deliver_from([127, 0, 0, 3], gate.addr, &payment("p-conn")).await;
    assert_eq!(status, 200, "a quarter of the connections stays for others");
    drop(idle);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_beyond_its_peers_share_is_answered_not_reset() {
    let (_redis, upstream, gate) =
        gate_with_limits("max_connections = 8\nheader_read_timeout = \"20s\"").await;
    // 127.0.0.2 holds its share (6 of 8) with idle connections.
    let mut idle = Vec::new();
    for _ in 0..6 {
        idle.push(connect_from([127, 0, 0, 2], gate.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, text) = answer_from([127, 0, 0, 2], gate.addr, &payment("p-over")).await;
    assert_eq!(status, 503, "answered, not reset: {text:?}");
    let lower = text.to_ascii_lowercase();
    assert!(lower.contains("\"reason\":\"over_capacity\""), "{text}");
    assert!(lower.contains("retry-after: 1"), "{text}");
    assert!(lower.contains("connection: close"), "{text}");
    assert_eq!(upstream.calls(), 0, "nothing forwarded");
    // Refused connections that stay silent take no slot: the two left to
    // other peers still serve 127.0.0.3.
    for _ in 0..2 {
        idle.push(connect_from([127, 0, 0, 2], gate.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = deliver_from([127, 0, 0, 3], gate.addr, &payment("p-other")).await;
    assert_eq!(status, 200, "the other peer's quarter is intact");
    drop(idle);
    gate.stop().await;
}

/// Connections of the flood: `IDEMGATE_FLOOD_CONNECTIONS` (default 2).
fn flood_connections() -> usize {
    std::env::var("IDEMGATE_FLOOD_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// HTTP/2 connections that each open up to 200 streams with 1 MiB bodies
/// stalled one byte short (a memory attack that took idemgate past 1 GiB
/// before `max_buffered_bytes`) against the binary on its
/// default limits. Peak RSS is printed; `IDEMGATE_BIN` runs the same flood
/// against another build, which is how the figures in bench/RESULTS.md
/// ("HTTP/2 body flood") were taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_body_flood_stays_inside_the_budget() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store_timing_out(&redis, "2s"), &upstream.url(), "")
        .replace("[limits]", "[limits]\nbody_read_timeout = \"30s\"");
    let gate = GateProcess::start(&text);
    let idle_kib = peak_rss_kib(gate.pid());
    let mut streams = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..flood_connections() {
        let stream = TcpStream::connect(gate.addr).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake::<_, _, Stalling>(
            TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        connections.push(tokio::spawn(async move {
            let _ = connection.await;
        }));
        for _ in 0..200 {
            let mut sender = sender.clone();
            let request = http::Request::post(gate.url("/notify"))
                .header("content-length", 1024 * 1024)
                .body(Stalling {
                    remaining: 1024 * 1024 - 1,
                })
                .unwrap();
            streams.push(tokio::spawn(async move {
                let answer = sender.send_request(request).await.ok()?;
                let status = answer.status().as_u16();
                let body = answer.into_body().collect().await.ok()?.to_bytes();
                Some((status, body))
            }));
        }
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let peak_kib = peak_rss_kib(gate.pid());
    let mut over_capacity = 0;
    for stream in streams {
        if !stream.is_finished() {
            stream.abort();
            continue;
        }
        if let Some((status, body)) = stream.await.unwrap() {
            let body = String::from_utf8_lossy(&body);
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("over_capacity"), "{body}");
            over_capacity += 1;
        }
    }
    for connection in connections {
        connection.abort();
    }
    println!(
        "HTTP/2 body flood: {} connections x 200 streams x 1 MiB stalled; peak RSS idle {} MiB, under flood {} MiB; {over_capacity} streams answered 503 over_capacity",
        flood_connections(),
        idle_kib / 1024,
        peak_kib / 1024,
    );
    // 64 MiB of budget plus the process itself: far below the
    // 200 streams x 1 MiB per connection the flood offers.
    assert!(
        peak_kib < 320 * 1024,
        "peak RSS {} MiB under the flood",
        peak_kib / 1024
    );
    assert!(over_capacity > 0, "the flood went beyond the budget");
    let served = deliver_until_served(
        &gate.url("/notify"),
        &payment("p-after-flood"),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        served.status, 200,
        "deliveries are served once the flood is gone"
    );
    assert_eq!(upstream.calls(), 1, "no flooded body reached the handler");
}
