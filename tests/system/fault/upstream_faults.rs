//! Upstream faults: refused connections, resets mid-answer, slow answers
//! and a storm of 500s.

use super::*;

/// idemgate in this process on the test route, forwarding to `addr`
/// (a [`RawUpstream`], or nothing yet).
async fn gate_to(redis: &RedisServer, addr: SocketAddr) -> Gate {
    Gate::start(&config_text(
        &redis_store(redis),
        &format!("http://{addr}"),
        "",
    ))
    .await
}

/// Connection refused: nothing was sent, so the claim is released and the
/// retry is forwarded once the upstream is back.
async fn refused_connection_releases() {
    let redis = RedisServer::start();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let gate = gate_to(&redis, addr).await;
    let url = gate.url("/notify");
    let body = payment("refused");
    for _ in 0..2 {
        let refused = deliver(&url, &body).await;
        assert_eq!(refused.status, 502, "{refused:?}");
        assert_eq!(refused.reason().as_deref(), Some("upstream_error"));
        assert!(redis.keys(RECORDS).is_empty(), "claim released");
    }
    let upstream = RawUpstream::bind(addr, false).await;
    let forwarded = deliver(&url, &body).await;
    assert_eq!(forwarded.status, 200);
    assert_eq!(forwarded.replayed(), Some("false"));
    let replay = deliver(&url, &body).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.body, forwarded.body);
    assert_eq!(upstream.requests(), 1);
    gate.stop().await;
    println!(
        "[fault] upstream_faults/refused: 2 x 502 with no record left, then 1 execution and a replay"
    );
}

/// The upstream writes a 200 head and resets the connection mid-body: it
/// may have acted, so the outcome is unknown and the retry is not forwarded.
async fn reset_mid_response_is_unknown() {
    let redis = RedisServer::start();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let upstream = RawUpstream::bind(addr, true).await;
    let gate = gate_to(&redis, addr).await;
    let url = gate.url("/notify");
    let body = payment("reset");
    let cut = deliver(&url, &body).await;
    assert_eq!(cut.status, 502, "{cut:?}");
    assert_eq!(cut.reason().as_deref(), Some("upstream_error"));
    for _ in 0..3 {
        let retry = deliver(&url, &body).await;
        assert_eq!(retry.status, 409, "{retry:?}");
        assert_eq!(retry.reason().as_deref(), Some("outcome_unknown"));
        assert!(retry.header("retry-after").is_some());
    }
    assert_eq!(upstream.requests(), 1, "never forwarded again");
    assert_eq!(redis.keys(RECORDS).len(), 1, "the unknown record stays");
    gate.stop().await;
    println!("[fault] upstream_faults/reset: 502, then 3 retries 409 outcome_unknown, 1 execution");
}

/// A slow upstream outlives many short leases; renewal keeps the claim, so
/// duplicates on another instance are 409 in_flight, never a second call.
async fn slow_upstream_keeps_its_claim() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_secs(2))).await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "lease = \"300ms\"\nunknown_hold = \"300ms\"\non_in_flight = \"conflict\"",
    );
    let (one, two) = (Gate::start(&text).await, Gate::start(&text).await);
    let body = payment("slow");
    let started = Instant::now();
    let first = tokio::spawn({
        let (url, body) = (one.url("/notify"), body.clone());
        async move { deliver(&url, &body).await }
    });
    // 1.5x, 3x and 5x the lease: without renewal the claim (lease + hold =
    // 600 ms) would have turned unknown, then expired.
    for at_ms in [450u64, 900, 1500] {
        let at = started + Duration::from_millis(at_ms);
        tokio::time::sleep(at.saturating_duration_since(Instant::now())).await;
        let duplicate = deliver(&two.url("/notify"), &body).await;
        assert_eq!(duplicate.status, 409, "at {at_ms} ms: {duplicate:?}");
        assert_eq!(
            duplicate.reason().as_deref(),
            Some("in_flight"),
            "at {at_ms} ms"
        );
    }
    let first = first.await.expect("first delivery");
    assert_eq!(first.status, 200);
    let replay = deliver(&two.url("/notify"), &body).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.body, first.body);
    assert_eq!(upstream.calls(), 1);
    one.stop().await;
    two.stop().await;
    println!(
        "[fault] upstream_faults/slow: duplicates at 1.5x/3x/5x lease all 409 in_flight, 1 execution"
    );
}

/// 200 keys all answered 500: every claim released, nothing stuck in
/// flight, and every retry forwarded once the upstream is healthy.
async fn five_hundred_storm_leaves_nothing() {
    let redis = RedisServer::start();
    let storm = Arc::new(AtomicBool::new(true));
    let upstream = Upstream::scripted({
        let storm = Arc::clone(&storm);
        move |_, _| {
            if storm.load(Ordering::SeqCst) {
                Reply::status(500)
            } else {
                Reply::ok()
            }
        }
    })
    .await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let urls = vec![gate.url("/notify")];
    let ids: Vec<String> = (0..200).map(|i| format!("storm-{i}")).collect();
    let sender = Sender::new();

    let (answers, _) = hammer(&sender, &urls, &ids, 1, 32).await;
    for (id, list) in &answers {
        assert_eq!(
            list[0].status, 500,
            "{id}: the upstream's answer is passed on"
        );
        assert!(is_live(&list[0]), "{id}");
    }
    assert_eq!(upstream.calls(), 200);
    let left = redis.keys(RECORDS);
    assert!(left.is_empty(), "no record left behind: {left:?}");

    storm.store(false, Ordering::SeqCst);
    let (answers, _) = hammer(&sender, &urls, &ids, 1, 32).await;
    for (id, list) in &answers {
        assert_eq!(list[0].status, 200, "{id}");
        assert!(is_live(&list[0]), "{id}: forwarded, not replayed");
    }
    assert_eq!(upstream.calls(), 400);
    let executed = executions(&upstream);
    assert!(ids.iter().all(|id| executed[id] == 2));
    assert_eq!(redis.keys(RECORDS).len(), 200);
    gate.stop().await;
    println!(
        "[fault] upstream_faults/5xx storm: 200 x 500, 0 records left, 200 retries forwarded (400 executions)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_faults() {
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    refused_connection_releases().await;
    reset_mid_response_is_unknown().await;
    slow_upstream_keeps_its_claim().await;
    five_hundred_storm_leaves_nothing().await;
    report_time("upstream_faults", started);
}

/// A bare TCP upstream: reads one request per connection, then either
/// answers 200 properly or writes the head of a 200 and resets the
/// connection mid-body.
struct RawUpstream {
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl RawUpstream {
    async fn bind(addr: SocketAddr, cut: bool) -> Self {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind raw upstream");
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    break;
                };
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    if !read_request(&mut stream).await {
                        return;
                    }
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    if cut {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{\"partial\":";
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.flush().await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        // RST instead of FIN: the answer is cut, not finished.
                        let _ = stream.set_zero_linger();
                        drop(stream);
                    } else {
                        let body = format!("{{\"raw\":{n}}}");
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(answer.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    }
                });
            }
        });
        Self { requests, task }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads a request head and its `content-length` body (bounded in size
/// and time). Returns whether a whole request arrived.
async fn read_request(stream: &mut tokio::net::TcpStream) -> bool {
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while buf.len() < 1 << 20 {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Some(());
            }
        }
        None
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), read).await,
        Ok(Some(()))
    )
}
