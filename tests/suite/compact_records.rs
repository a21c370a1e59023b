//! Compact records (layout v4, `src/record/compact.rs`): an answer equal to
//! the route's acknowledgement is stored as a 60-byte marker and replayed
//! byte for byte, on Redis and on the embedded store; any other answer is
//! stored whole; a marker whose acknowledgement was edited away never
//! forwards again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::*;

/// The admin token of the test that reads the record view.
const TOKEN: &str = "admin-token-for-compact-tests";

/// The length of a compact record (layout v4).
const COMPACT_LEN: usize = 60;

/// `[route.inbox]` with Adyen's acknowledgement, `body` its `ack_body`
/// (appended after `[route.idempotency]`, the last table of the test route).
fn inbox_ack(body: &str) -> String {
    format!(
        "\n[route.inbox]\nack_status = 200\nack_body = \"{body}\"\nack_content_type = \"text/plain\"\n"
    )
}

/// An upstream that answers every request with 200, `content-type:
/// text/plain`, a `Date` header, `extra` header lines and `body`, written
/// raw so nothing else is added; counts its calls.
struct RawUpstream {
    url: String,
    calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl RawUpstream {
    async fn start(body: &'static str, extra: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|line| line.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if seen.len() < end + 4 + length {
                            continue;
                        }
                        seen.drain(..end + 4 + length);
                        counted.fetch_add(1, Ordering::SeqCst);
                        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: {date}\r\n{extra}content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { url, calls, task }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An answer's headers without the two a replay adds.
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let mut headers = headers.clone();
    headers.remove("idempotent-replayed");
    headers.remove("age");
    headers
}

/// Delivers `id` twice; asserts the second is a replay equal to the first
/// (status, body, every header but `Idempotent-Replayed` and `Age`).
async fn first_and_replay(gate: &Gate, id: &str) -> (Answer, Answer) {
    let body = payment(id);
    let first = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.replayed(), Some("false"));
    let second = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(second.replayed(), Some("true"));
    assert_eq!(second.status, first.status);
    assert_eq!(second.body, first.body);
    assert_eq!(end_to_end(&second.headers), end_to_end(&first.headers));
    (first, second)
}

/// The single record Redis holds for the test route.
fn only_record(redis: &RedisServer) -> Vec<u8> {
    let keys = redis.keys("idemgate:pay:*");
    assert_eq!(keys.len(), 1, "{keys:?}");
    redis.get_bytes(&keys[0])
}

#[tokio::test]
async fn an_ack_answer_is_a_compact_record_on_redis_and_replays_the_same_bytes() {
    let upstream = RawUpstream::start("[accepted]", "").await;
    let redis = RedisServer::start();
    let text = config_text(
        &redis_store(&redis),
        &upstream.url,
        &inbox_ack("[accepted]"),
    );
    let gate = Gate::start(&format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n")).await;
    let (first, _) = first_and_replay(&gate, "p-compact").await;
    assert_eq!(&first.body[..], b"[accepted]");
    assert!(
        first.header("date").is_some(),
        "the upstream's Date went through"
    );
    let record = only_record(&redis);
    assert_eq!(record.len(), COMPACT_LEN, "{record:?}");
    assert_eq!(record[0], 4, "layout v4");
    // Later copies (from the replay cache once it has the record) too.
    for _ in 0..3 {
        let again = deliver(&gate.url("/notify"), &payment("p-compact")).await;
        assert_eq!(again.replayed(), Some("true"));
        assert_eq!(again.body, first.body);
        assert_eq!(end_to_end(&again.headers), end_to_end(&first.headers));
    }
    assert_eq!(upstream.calls(), 1);
    // The record view names the acknowledgement instead of a body.
    let view = admin_call("GET", gate.admin, "/admin/records/pay/p-compact", TOKEN).await;
    assert_eq!(view.status, 200);
    let view: serde_json::Value = serde_json::from_slice(&view.body).unwrap();
    assert_eq!(view["state"], "completed");
    assert_eq!(view["status"], 200);
    assert_eq!(
        view["acknowledgement"].as_str().map(str::len),
        Some(8),
        "{view}"
    );
    // A duplicate with another body is still a fingerprint mismatch.
    let mut other = payment("p-compact");
    other.push(' ');
    assert_eq!(deliver(&gate.url("/notify"), &other).await.status, 422);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test]
async fn an_answer_with_another_header_or_body_is_stored_whole() {
    for (body, extra) in [
        ("[accepted]", "server: BaseHTTP/0.6\r\n"),
        ("[accepted]!", ""),
    ] {
        let upstream = RawUpstream::start(body, extra).await;
        let redis = RedisServer::start();
        let text = config_text(
            &redis_store(&redis),
            &upstream.url,
            &inbox_ack("[accepted]"),
        );
        let gate = Gate::start(&text).await;
        let (first, _) = first_and_replay(&gate, "p-whole").await;
        assert_eq!(&first.body[..], body.as_bytes());
        let record = only_record(&redis);
        assert_eq!(record[0], 3, "layout v3: {body} {extra:?}");
        assert!(record.len() > COMPACT_LEN + 40, "{}", record.len());
        gate.stop().await;
    }
}

#[tokio::test]
async fn a_marker_whose_ack_was_edited_replays_answer_not_stored_and_never_forwards() {
    let upstream = RawUpstream::start("[accepted]", "").await;
    let redis = RedisServer::start();
    let store = redis_store(&redis);
    let gate = Gate::start(&config_text(
        &store,
        &upstream.url,
        &inbox_ack("[accepted]"),
    ))
    .await;
    let body = payment("p-edited");
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 200);
    assert_eq!(only_record(&redis).len(), COMPACT_LEN);
    gate.stop().await;

    let edited = config_text(&store, &upstream.url, &inbox_ack("[ACCEPTED]"));
    let gate = Gate::start(&edited).await;
    let replay = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(replay.status, 200, "the stored status");
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.reason().as_deref(), Some("answer_not_stored"));
    assert_eq!(
        replay.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(upstream.calls(), 1, "never forwarded again");
    gate.stop().await;
}

#[tokio::test]
async fn the_embedded_store_keeps_the_same_compact_record() {
    let upstream = RawUpstream::start("[accepted]", "").await;
    let (dir, store) = temp_embedded_store();
    let text = config_text(&store, &upstream.url, &inbox_ack("[accepted]"));
    let gate = Gate::start(&text).await;
    first_and_replay(&gate, "p-embedded").await;
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;

    let db = redb::Database::open(dir.path().join("idemgate.redb")).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let records: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("records");
    let table = read.open_table(records).unwrap();
    let values: Vec<Vec<u8>> = redb::ReadableTable::iter(&table)
        .unwrap()
        .map(|entry| entry.unwrap().1.value().to_vec())
        .collect();
    assert_eq!(values.len(), 1);
    // An 8-byte expiry, then the record.
    assert_eq!(values[0].len(), 8 + COMPACT_LEN);
    assert_eq!(values[0][8], 4, "layout v4");
}

/// Sends a signed delivery of `body` on a fresh connection (`connection:
/// close`) and returns the answer's bytes as they came, without the
/// `idempotent-replayed`, `age` and `connection` lines.
async fn raw_answer(gate: &Gate, body: &str) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(gate.addr).await.unwrap();
    let mut head = format!(
        "POST /notify HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
        gate.addr,
        body.len()
    );
    for (name, value) in signed(body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut raw),
    )
    .await
    .expect("an answer within 10 s")
    .unwrap();
    let text = String::from_utf8(raw).unwrap();
    text.split_inclusive("\r\n")
        .filter(|line| {
            let lower = line.to_ascii_lowercase();
            !lower.starts_with("idempotent-replayed:")
                && !lower.starts_with("age:")
                // Framing hyper writes where it will (also for whole records).
                && !lower.starts_with("connection:")
        })
        .collect::<String>()
        .into_bytes()
}

#[tokio::test]
async fn a_replay_of_a_compact_record_is_the_first_answer_byte_for_byte() {
    let upstream = RawUpstream::start("[accepted]", "").await;
    let redis = RedisServer::start();
    let text = config_text(
        &redis_store(&redis),
        &upstream.url,
        &inbox_ack("[accepted]"),
    );
    let gate = Gate::start(&text).await;
    let body = payment("p-bytes");
    let first = raw_answer(&gate, &body).await;
    assert_eq!(only_record(&redis).len(), COMPACT_LEN);
    let replay = raw_answer(&gate, &body).await;
    assert_eq!(
        String::from_utf8_lossy(&replay),
        String::from_utf8_lossy(&first),
        "status line, headers in order, body"
    );
    assert!(first.ends_with(b"\r\n\r\n[accepted]"));
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}
