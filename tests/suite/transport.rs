//! Connections that hold a slot without making progress: silent sockets,
//! an HTTP/2 preface with nothing after it, a preface or SETTINGS frame
//! trickled a byte at a time, idle keep-alive and HTTP/2 connections
//! (pinging or not). Each must lose its slot on a clock that starts at
//! accept, so `max_connections` such sockets can not lock the proxy out;
//! a request that is still being answered must not.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

/// Reads until the server closes `stream`; how long that took, or `None`
/// if it was still open after `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

/// Writes `bytes` one at a time, `gap` apart, ignoring a closed socket.
async fn trickle(stream: &mut TcpStream, bytes: &[u8], gap: Duration) {
    for byte in bytes {
        if stream.write_all(std::slice::from_ref(byte)).await.is_err() {
            return;
        }
        tokio::time::sleep(gap).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_that_never_start_a_request_lose_their_slot() {
    let (_redis, upstream, gate) = gate_with_limits(
        "max_connections = 4\nheader_read_timeout = \"1s\"\nidle_timeout = \"1s\"",
    )
    .await;
    // Each from an address of its own: one peer may hold only three of the
    // four slots (`max_connections` is shared between peers).
    let silent = connect_from([127, 0, 0, 11], gate.addr).await;
    let mut preface_only = connect_from([127, 0, 0, 12], gate.addr).await;
    preface_only.write_all(PREFACE).await.unwrap();
    let slow_settings = connect_from([127, 0, 0, 13], gate.addr).await;
    let slow_preface = connect_from([127, 0, 0, 14], gate.addr).await;
    let holders = [
        ("silent", silent, None),
        ("preface only", preface_only, None),
        ("slow SETTINGS", slow_settings, Some((PREFACE, SETTINGS))),
        ("slow preface", slow_preface, Some((PREFACE, &[][..]))),
    ];
    let watchers: Vec<_> = holders
        .into_iter()
        .map(|(kind, mut stream, trickled)| {
            tokio::spawn(async move {
                let feeding = async {
                    if let Some((first, then)) = trickled {
                        if then.is_empty() {
                            trickle(&mut stream, first, Duration::from_millis(150)).await;
                        } else {
                            let _ = stream.write_all(first).await;
                            trickle(&mut stream, then, Duration::from_millis(400)).await;
                        }
                    }
                    // Then nothing more: wait to be closed.
                    closed_within(&mut stream, Duration::from_secs(8)).await
                };
                let started = Instant::now();
                let closed = feeding.await.map(|_| started.elapsed());
                (kind, closed)
            })
        })
        .collect();
    // All four slots are taken: a delivery can only be served once the
    // server frees one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(8),
        deliver(&gate.url("/notify"), &payment("p-lockout")),
    )
    .await
    .expect("a delivery is served once the silent connections lose their slots");
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    println!(
        "delivery behind 4 stalled connections served after {:?}",
        started.elapsed()
    );
    for watcher in watchers {
        let (kind, closed) = watcher.await.unwrap();
        let closed = closed.unwrap_or_else(|| panic!("{kind} connection still open after 8 s"));
        println!("{kind} connection closed {closed:?} after accept");
    }
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_idle_timeout() {
    // header_read_timeout alone would keep the connection for 30 s.
    let (_redis, upstream, gate) =
        gate_with_limits("header_read_timeout = \"30s\"\nidle_timeout = \"1s\"").await;
    let mut stream = write_raw_delivery(gate.addr, &payment("p-idle-h1")).await;
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let closed = closed_within(&mut stream, Duration::from_secs(5))
        .await
        .expect("idle keep-alive connection closed after idle_timeout");
    println!("idle HTTP/1.1 keep-alive connection closed after {closed:?}");
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

/// An HTTP/2 connection (prior knowledge) to `addr`, pinging every
/// `ping` if given; the task ends when the server closes the connection.
async fn http2(
    addr: std::net::SocketAddr,
    ping: Option<Duration>,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    builder.timer(TokioTimer::new());
    if let Some(every) = ping {
        builder
            .keep_alive_interval(every)
            .keep_alive_while_idle(true);
    }
    let (sender, connection) = builder.handshake(TokioIo::new(stream)).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, task)
}

/// A signed delivery of `body` as an HTTP/2 request.
fn signed_request(gate: &Gate, body: &str) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::post(gate.url("/notify"));
    for (name, value) in signed(body) {
        request = request.header(name, value);
    }
    request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_even_while_it_pings() {
    let (_redis, upstream, gate) =
        gate_with_limits("header_read_timeout = \"30s\"\nidle_timeout = \"1s\"").await;
    for ping in [None, Some(Duration::from_millis(200))] {
        let (mut sender, connection) = http2(gate.addr, ping).await;
        let body = payment(&format!("p-idle-h2-{}", ping.is_some()));
        let answer = sender
            .send_request(signed_request(&gate, &body))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let _ = answer.into_body().collect().await;
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), connection)
            .await
            .expect("idle HTTP/2 connection closed after idle_timeout")
            .unwrap();
        println!(
            "idle HTTP/2 connection (pinging: {}) closed after {:?}",
            ping.is_some(),
            started.elapsed()
        );
    }
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}

#[tokio::test]
async fn a_request_answered_slower_than_idle_timeout_is_not_cut() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(2500))).await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "").replace(
        "[limits]",
        "[limits]\nheader_read_timeout = \"1s\"\nidle_timeout = \"1s\"",
    );
    let gate = Gate::start(&text).await;
    let (mut sender, _connection) = http2(gate.addr, None).await;
    let answer = sender
        .send_request(signed_request(&gate, &payment("p-slow-h2")))
        .await
        .expect("a slow answer arrives on an HTTP/2 connection");
    assert_eq!(answer.status(), 200);
    let answer = deliver(&gate.url("/notify"), &payment("p-slow-h1")).await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}
