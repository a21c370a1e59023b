//! `idemgate demo`: the product's promise, shown end to end on loopback.
//!
//! Payment gateways and webhook senders deliver *at least once*: they retry
//! after a lost answer, race their own retries, and retry after hanging up.
//! Passed straight to a legacy handler, each copy ships the order again.
//! This demo wires up the three parties of that story, all in this process
//! and all on `127.0.0.1` with ports chosen by the OS:
//!
//! * a **legacy handler** (a tiny hyper server) that "ships an order" for
//!   every payment notification it accepts and counts, per payment, how
//!   often it was called and how often it shipped; it can be slow or fail
//!   once for particular payments;
//! * **idemgate** itself, started through [`crate::app::start`] with an
//!   embedded store in a fresh temporary directory and one HMAC-signed
//!   `payments` route in front of the handler;
//! * a **sender** that behaves like a real gateway: every retry is re-signed
//!   with a fresh timestamp, duplicates arrive in bursts, a connection is
//!   dropped mid-request, and a forger and a replayer of a stale capture try
//!   their luck.
//!
//! Each scenario uses its own payment number, checks what the sender got
//! and what the handler did against SPEC §1–§4, and becomes one row of the
//! printed table. [`run`] returns `Ok(true)` only if every row is `ok`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::app::RunningApp;
use crate::config::{Algorithm, Config};
use crate::pipeline::settle::REPLAYED_HEADER;
use crate::record::now_ms;
use crate::signature::mac;

/// The secret the gateway and idemgate share.
const SECRET: &[u8] = b"demo-secret";
/// What the forger signs with.
const FORGED_SECRET: &[u8] = b"guessed-secret";
/// Where the gateway delivers its notifications.
const NOTIFY_PATH: &str = "/notify/payment";
/// Upper bound for any single exchange; the demo treats more as broken.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Payment numbers, one per scenario, so the handler's counts stay apart.
const RETRIES_ID: &str = "PAY-1001";
const BURST_ID: &str = "PAY-1002";
const HANGUP_ID: &str = "PAY-1003";
const FLAKY_ID: &str = "PAY-1004";
const FORGED_ID: &str = "PAY-1005";
const STALE_ID: &str = "PAY-1006";

/// Copies in the concurrent burst.
const BURST_SIZE: usize = 10;
/// How long the handler works on the burst's payment, so the copies overlap.
const BURST_WORK: Duration = Duration::from_millis(300);
/// How long the handler works on the hang-up scenario's payment.
const HANGUP_WORK: Duration = Duration::from_secs(1);
/// When the impatient sender drops its connection.
const HANGUP_AFTER: Duration = Duration::from_millis(100);
/// When it retries, counted from the hang-up: after the handler finished.
const HANGUP_RETRY_AFTER: Duration = Duration::from_millis(1_400);
/// How old the captured, replayed delivery is (tolerance is 5 minutes).
const STALE_AGE: Duration = Duration::from_secs(600);

/// Runs the demonstration and prints its table.
///
/// Returns `Ok(true)` if every scenario behaved as specified, `Ok(false)`
/// if any did not, and `Err` if the demo could not run at all (a socket,
/// the temporary directory, idemgate failing to start).
pub async fn run() -> Result<bool, String> {
    let workdir = WorkDir::create()?;
    let handler = LegacyHandler::start(behaviours()).await?;
    let config = Config::parse(&config_text(&workdir.path, handler.addr)?)
        .map_err(|error| format!("demo configuration: {error}"))?;
    let app = crate::app::start(config, None)
        .await
        .map_err(|error| format!("starting idemgate: {error}"))?;
    print_setup(&app, &handler, &workdir.path);

    let sender = Sender::new(app.proxy_addr);
    let reports = run_scenarios(&sender, &handler).await;
    drop(sender);
    app.stop().await;
    drop(handler); // aborts the handler's server task
    drop(workdir); // removes the temporary directory

    let reports = reports?;
    print_table(&reports);
    Ok(print_summary(&reports))
}

/// The per-payment quirks of the legacy handler.
fn behaviours() -> HashMap<&'static str, Behaviour> {
    HashMap::from([
        (BURST_ID, Behaviour::Slow(BURST_WORK)),
        (HANGUP_ID, Behaviour::Slow(HANGUP_WORK)),
        (FLAKY_ID, Behaviour::FailFirst),
    ])
}

/// The scenarios, in order; each one's report, or the first
/// infrastructure failure.
async fn run_scenarios(sender: &Sender, handler: &LegacyHandler) -> Result<Vec<Report>, String> {
    Ok(vec![
        sequential_retries(sender, handler).await?,
        concurrent_burst(sender, handler).await?,
        hang_up_mid_request(sender, handler).await?,
        failure_then_success(sender, handler).await?,
        forged_delivery(sender, handler).await?,
        stale_delivery(sender, handler).await?,
    ])
}

// ---------------------------------------------------------------------------
// Configuration and the temporary directory
// ---------------------------------------------------------------------------

/// A payment-gateway style route: hex HMAC-SHA256 of the body in
/// `X-Signature`, a millisecond timestamp in the body checked against a
/// five-minute window, the payment number and status as the key, and the
/// timestamp left out of the fingerprint because every retry is re-signed.
fn config_text(workdir: &Path, upstream: SocketAddr) -> Result<String, String> {
    let store = workdir.join("idemgate.redb");
    let store = store
        .to_str()
        .ok_or_else(|| format!("temporary path {} is not UTF-8", store.display()))?;
    // A JSON string is a valid TOML basic string.
    let store = serde_json::Value::from(store).to_string();
    Ok(format!(
        r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[limits]
shutdown_grace = "5s"

[store]
kind = "embedded"
path = {store}

[upstream]
url = "http://{upstream}"
timeout = "5s"

[[route]]
name = "payments"
path_prefix = "/notify"
methods = ["POST"]

[route.signature]
scheme = "hmac"
secrets = ["literal:demo-secret"]
algorithm = "sha256"
signature = "header:X-Signature"
encoding = "hex"
message = "{{body}}"
timestamp = "json:/timestamp"
timestamp_unit = "ms"
tolerance = "5m"

[route.idempotency]
key = ["json:/paymentNo", "json:/status"]
fingerprint = ["method", "path", "body"]
fingerprint_ignore = ["json:/timestamp"]
lease = "30s"
retention = "24h"
on_in_flight = "wait"
wait_timeout = "5s"
cache_status = ["2xx", "4xx"]
"#
    ))
}

/// A fresh directory under the system temp dir for the embedded store,
/// removed when the demo ends (also on an early error, via `Drop`).
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn create() -> Result<Self, String> {
        let unique = format!("idemgate-demo-{}-{}", std::process::id(), now_ms());
        let path = std::env::temp_dir().join(unique);
        std::fs::create_dir(&path)
            .map_err(|error| format!("creating {}: {error}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            eprintln!("could not remove {}: {error}", self.path.display());
        }
    }
}

// ---------------------------------------------------------------------------
// The stand-in legacy handler
// ---------------------------------------------------------------------------

/// How the handler treats one payment.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Works this long before answering.
    Slow(Duration),
    /// Answers 500 (nothing shipped) to the first call, then works normally.
    FailFirst,
}

/// What the handler did, per payment number.
#[derive(Debug, Default)]
struct Ledger {
    /// Requests received.
    calls: HashMap<String, u32>,
    /// Orders shipped (answered 200): the side effect that must not repeat.
    shipped: HashMap<String, u32>,
    /// Orders shipped in total, numbering the answers.
    orders: u32,
}

/// The handler's shared state.
#[derive(Debug)]
struct HandlerState {
    behaviours: HashMap<&'static str, Behaviour>,
    ledger: Mutex<Ledger>,
}

impl HandlerState {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a call; returns its number for this payment.
    fn record_call(&self, id: &str) -> u32 {
        let mut ledger = self.ledger();
        let calls = ledger.calls.entry(id.to_owned()).or_default();
        *calls += 1;
        *calls
    }

    /// Ships the order; returns its order number.
    fn ship(&self, id: &str) -> u32 {
        let mut ledger = self.ledger();
        *ledger.shipped.entry(id.to_owned()).or_default() += 1;
        ledger.orders += 1;
        ledger.orders
    }
}

/// A running stand-in for a legacy payment-callback handler: it ships an
/// order for every notification it accepts, without any deduplication of
/// its own.
struct LegacyHandler {
    addr: SocketAddr,
    state: Arc<HandlerState>,
    server: JoinHandle<()>,
}

impl LegacyHandler {
    async fn start(behaviours: HashMap<&'static str, Behaviour>) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("binding the legacy handler: {error}"))?;
        let addr = listener
            .local_addr()
            .map_err(|error| format!("legacy handler address: {error}"))?;
        let state = Arc::new(HandlerState {
            behaviours,
            ledger: Mutex::default(),
        });
        let server = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(Self {
            addr,
            state,
            server,
        })
    }

    /// `(calls, orders shipped)` for one payment.
    fn counts(&self, id: &str) -> (u32, u32) {
        let ledger = self.state.ledger();
        let calls = ledger.calls.get(id).copied().unwrap_or(0);
        let shipped = ledger.shipped.get(id).copied().unwrap_or(0);
        (calls, shipped)
    }
}

/// Dropping the handler stops it: the accept loop is aborted and with it
/// every open connection.
impl Drop for LegacyHandler {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Serves connections until aborted; aborting drops the `JoinSet`, which
/// aborts every connection task with it.
async fn accept_loop(listener: TcpListener, state: Arc<HandlerState>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors and the like: back off briefly.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let state = Arc::clone(&state);
        let service = hyper::service::service_fn(move |request| {
            handle_notification(Arc::clone(&state), request)
        });
        connections.spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// The legacy handler's one endpoint.
async fn handle_notification(
    state: Arc<HandlerState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let Some(id) = payment_number(request).await else {
        return Ok(json_response(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({ "error": "no paymentNo" }),
        ));
    };
    let attempt = state.record_call(&id);
    match state.behaviours.get(id.as_str()) {
        Some(Behaviour::Slow(work)) => tokio::time::sleep(*work).await,
        Some(Behaviour::FailFirst) if attempt == 1 => {
            return Ok(json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &serde_json::json!({ "error": "database busy, nothing shipped" }),
            ));
        }
        Some(Behaviour::FailFirst) | None => {}
    }
    let order = state.ship(&id);
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "shipped": id, "order": order }),
    ))
}

async fn payment_number(request: Request<Incoming>) -> Option<String> {
    let body = request.into_body().collect().await.ok()?.to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).ok()?;
    json.get("paymentNo")?.as_str().map(str::to_owned)
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

// ---------------------------------------------------------------------------
// The at-least-once sender
// ---------------------------------------------------------------------------

/// One signed notification, as a gateway would send it.
#[derive(Debug, Clone)]
struct Delivery {
    body: String,
    signature: String,
}

impl Delivery {
    /// A "payment succeeded" notification for `id`, stamped `age` ago and
    /// signed with `secret`. Calling it again for a retry re-signs it with a
    /// fresh timestamp, as real gateways do.
    fn new(id: &str, secret: &[u8], age: Duration) -> Self {
        let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        let body = serde_json::json!({
            "paymentNo": id,
            "status": "SUCCESS",
            "amount": "49.90",
            "currency": "EUR",
            "timestamp": now_ms().saturating_sub(age_ms),
        })
        .to_string();
        let signature = hex::encode(mac(Algorithm::Sha256, secret, &[body.as_bytes()]));
        Self { body, signature }
    }

    /// A fresh, correctly signed notification.
    fn fresh(id: &str) -> Self {
        Self::new(id, SECRET, Duration::ZERO)
    }
}

/// What the sender got back for one delivery.
#[derive(Debug, Clone)]
enum Seen {
    /// The sender closed the connection before any answer.
    HungUp,
    /// An HTTP answer.
    Answer(Answer),
}

/// The parts of an answer the scenarios check.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    /// The `Idempotent-Replayed` header, if present.
    replayed: Option<bool>,
    /// The problem+json `reason`, for answers idemgate produced itself.
    reason: Option<String>,
    body: Bytes,
}

impl Seen {
    /// Short text for the table, e.g. `200 replayed`.
    fn label(&self) -> String {
        match self {
            Self::HungUp => "hung up".to_owned(),
            Self::Answer(answer) => match (&answer.reason, answer.replayed) {
                (Some(reason), _) => format!("{} {reason}", answer.status),
                (None, Some(true)) => format!("{} replayed", answer.status),
                (None, Some(false)) => format!("{} forwarded", answer.status),
                (None, None) => format!("{} unmarked", answer.status),
            },
        }
    }

    fn answer(&self) -> Option<&Answer> {
        match self {
            Self::HungUp => None,
            Self::Answer(answer) => Some(answer),
        }
    }
}

/// The simulated gateway: a pooled HTTP client pointed at idemgate.
struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
    proxy: SocketAddr,
}

impl Sender {
    fn new(proxy: SocketAddr) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            proxy,
        }
    }

    /// Sends one delivery and reads the whole answer.
    async fn send(&self, delivery: &Delivery) -> Result<Seen, String> {
        let request = Request::post(format!("http://{}{NOTIFY_PATH}", self.proxy))
            .header(header::CONTENT_TYPE, "application/json")
            .header("X-Signature", &delivery.signature)
            .body(Full::new(Bytes::from(delivery.body.clone())))
            .map_err(|error| format!("building a request: {error}"))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| format!("sending to idemgate: {error}"))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|error| format!("reading idemgate's answer: {error}"))?
                .to_bytes();
            Ok::<_, String>(Seen::Answer(answer_of(&parts, body)))
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no answer from idemgate within {EXCHANGE_TIMEOUT:?}"))?
    }

    /// Sends `copies` of one delivery at once and collects every answer.
    async fn burst(&self, delivery: &Delivery, copies: usize) -> Result<Vec<Seen>, String> {
        let mut tasks = JoinSet::new();
        for _ in 0..copies {
            let sender = Self {
                client: self.client.clone(),
                proxy: self.proxy,
            };
            let delivery = delivery.clone();
            tasks.spawn(async move { sender.send(&delivery).await });
        }
        let mut seen = Vec::with_capacity(copies);
        while let Some(joined) = tasks.join_next().await {
            seen.push(joined.map_err(|error| format!("sender task failed: {error}"))??);
        }
        // Arrival order means nothing here; list live answers before replays.
        seen.sort_by_key(|s| s.answer().and_then(|a| a.replayed));
        Ok(seen)
    }

    /// Writes a complete HTTP/1.1 request on a raw connection, waits
    /// `after`, and closes the connection without reading any answer.
    async fn hang_up(&self, delivery: &Delivery, after: Duration) -> Result<Seen, String> {
        let mut stream = TcpStream::connect(self.proxy)
            .await
            .map_err(|error| format!("connecting to idemgate: {error}"))?;
        let request = format!(
            "POST {NOTIFY_PATH} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             X-Signature: {}\r\nContent-Length: {}\r\n\r\n{}",
            self.proxy,
            delivery.signature,
            delivery.body.len(),
            delivery.body,
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|error| format!("writing to idemgate: {error}"))?;
        tokio::time::sleep(after).await;
        drop(stream);
        Ok(Seen::HungUp)
    }
}

fn answer_of(parts: &http::response::Parts, body: Bytes) -> Answer {
    let replayed = parts
        .headers
        .get(REPLAYED_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(|value| value == "true");
    let is_problem = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
    let reason = is_problem
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|problem| problem.get("reason")?.as_str().map(str::to_owned));
    Answer {
        status: parts.status.as_u16(),
        replayed,
        reason,
        body,
    }
}

// ---------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------

/// One row of the table: what was sent, what the handler did, what the
/// sender got, and every way that differed from the specification.
struct Report {
    title: &'static str,
    sent: usize,
    calls: u32,
    shipped: u32,
    seen: Vec<Seen>,
    problems: Vec<String>,
}

impl Report {
    fn new(title: &'static str, handler: &LegacyHandler, id: &str, seen: Vec<Seen>) -> Self {
        let (calls, shipped) = handler.counts(id);
        Self {
            title,
            sent: seen.len(),
            calls,
            shipped,
            seen,
            problems: Vec::new(),
        }
    }

    fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Notes `problem` unless `holds`.
    fn expect(&mut self, holds: bool, problem: impl FnOnce() -> String) {
        if !holds {
            self.problems.push(problem());
        }
    }

    /// The handler was called `calls` times and shipped `shipped` orders.
    fn expect_backend(&mut self, calls: u32, shipped: u32) {
        let (seen_calls, seen_shipped) = (self.calls, self.shipped);
        self.expect(seen_calls == calls, || {
            format!("expected {calls} backend call(s), saw {seen_calls}")
        });
        self.expect(seen_shipped == shipped, || {
            format!("expected {shipped} order(s) shipped, saw {seen_shipped}")
        });
    }

    /// Answer `index` has this status and `Idempotent-Replayed` value.
    fn expect_answer(&mut self, index: usize, status: u16, replayed: bool) {
        let got = self.seen.get(index).map(Seen::label);
        let matches = self
            .seen
            .get(index)
            .and_then(Seen::answer)
            .is_some_and(|a| a.status == status && a.replayed == Some(replayed));
        self.expect(matches, || {
            let want = if replayed { "replayed" } else { "forwarded" };
            format!(
                "delivery {}: expected {status} {want}, got {got:?}",
                index + 1
            )
        });
    }

    /// Answer `index` is idemgate's own problem+json with this status and reason.
    fn expect_rejection(&mut self, index: usize, status: u16, reason: &str) {
        let got = self.seen.get(index).map(Seen::label);
        let matches = self
            .seen
            .get(index)
            .and_then(Seen::answer)
            .is_some_and(|a| a.status == status && a.reason.as_deref() == Some(reason));
        self.expect(matches, || {
            format!(
                "delivery {}: expected {status} {reason}, got {got:?}",
                index + 1
            )
        });
    }

    /// Every answer at `indices` has exactly the body of answer `first`.
    fn expect_same_body(&mut self, first: usize, indices: impl IntoIterator<Item = usize>) {
        let body_at = |i: usize| self.seen.get(i).and_then(Seen::answer).map(|a| &a.body);
        let Some(reference) = body_at(first) else {
            self.problems
                .push(format!("delivery {}: no answer to compare with", first + 1));
            return;
        };
        let differing: Vec<usize> = indices
            .into_iter()
            .filter(|&i| body_at(i) != Some(reference))
            .map(|i| i + 1)
            .collect();
        self.expect(differing.is_empty(), || {
            format!(
                "deliveries {differing:?}: body differs from delivery {}",
                first + 1
            )
        });
    }
}

/// 1. The gateway did not see the answer and retries twice, each retry
///    re-signed: one shipment, the first answer live, the rest replays.
async fn sequential_retries(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(sender.send(&Delivery::fresh(RETRIES_ID)).await?);
    }
    let mut report = Report::new("sequential retries", handler, RETRIES_ID, seen);
    report.expect_backend(1, 1);
    report.expect_answer(0, 200, false);
    report.expect_answer(1, 200, true);
    report.expect_answer(2, 200, true);
    report.expect_same_body(0, [1, 2]);
    Ok(report)
}

/// 2. Ten copies race each other while the handler is busy: one shipment,
///    one live answer, nine replays of it.
async fn concurrent_burst(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let seen = sender.burst(&Delivery::fresh(BURST_ID), BURST_SIZE).await?;
    let mut report = Report::new("10 concurrent duplicates", handler, BURST_ID, seen);
    report.expect_backend(1, 1);
    let answers: Vec<&Answer> = report.seen.iter().filter_map(Seen::answer).collect();
    let all_ok = answers.len() == BURST_SIZE && answers.iter().all(|a| a.status == 200);
    let live = answers.iter().filter(|a| a.replayed == Some(false)).count();
    let replays = answers.iter().filter(|a| a.replayed == Some(true)).count();
    report.expect(all_ok, || format!("expected {BURST_SIZE} x 200"));
    report.expect(live == 1 && replays == BURST_SIZE - 1, || {
        format!(
            "expected 1 forwarded and {} replayed, saw {live} and {replays}",
            BURST_SIZE - 1
        )
    });
    report.expect_same_body(0, 1..BURST_SIZE);
    Ok(report)
}

/// 3. The gateway gives up after 100 ms while the handler works for a
///    second, then retries: the work was not cancelled, and the retry gets
///    its answer without a second shipment.
async fn hang_up_mid_request(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let first = sender
        .hang_up(&Delivery::fresh(HANGUP_ID), HANGUP_AFTER)
        .await?;
    tokio::time::sleep(HANGUP_RETRY_AFTER).await;
    let retry = sender.send(&Delivery::fresh(HANGUP_ID)).await?;
    let mut report = Report::new(
        "hang-up mid-request, retry",
        handler,
        HANGUP_ID,
        vec![first, retry],
    );
    report.expect_backend(1, 1);
    report.expect_answer(1, 200, true);
    let shipped_this = report
        .seen
        .get(1)
        .and_then(Seen::answer)
        .and_then(|a| serde_json::from_slice::<serde_json::Value>(&a.body).ok())
        .is_some_and(|body| body.get("shipped").and_then(|v| v.as_str()) == Some(HANGUP_ID));
    report.expect(shipped_this, || {
        "the replay is not the handler's answer for this payment".to_owned()
    });
    Ok(report)
}

/// 4. The handler fails once: the 500 is passed through and leaves no
///    trace, the retry is forwarded and ships, a third copy is a replay.
async fn failure_then_success(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(sender.send(&Delivery::fresh(FLAKY_ID)).await?);
    }
    let mut report = Report::new("500 once, then retries", handler, FLAKY_ID, seen);
    report.expect_backend(2, 1);
    report.expect_answer(0, 500, false);
    report.expect_answer(1, 200, false);
    report.expect_answer(2, 200, true);
    report.expect_same_body(1, [2]);
    Ok(report)
}

/// 5. A delivery signed with the wrong secret: 401, the handler untouched.
async fn forged_delivery(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let forged = Delivery::new(FORGED_ID, FORGED_SECRET, Duration::ZERO);
    let seen = vec![sender.send(&forged).await?];
    let mut report = Report::new("forged signature", handler, FORGED_ID, seen);
    report.expect_backend(0, 0);
    report.expect_rejection(0, 401, "signature_invalid");
    Ok(report)
}

/// 6. A correctly signed capture replayed ten minutes later: 401, the
///    handler untouched.
async fn stale_delivery(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let stale = Delivery::new(STALE_ID, SECRET, STALE_AGE);
    let seen = vec![sender.send(&stale).await?];
    let mut report = Report::new("stale timestamp (10 min old)", handler, STALE_ID, seen);
    report.expect_backend(0, 0);
    report.expect_rejection(0, 401, "timestamp_out_of_window");
    Ok(report)
}

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

fn print_setup(app: &RunningApp, handler: &LegacyHandler, workdir: &Path) {
    println!("idemgate demo: an at-least-once sender, idemgate, and a legacy handler");
    println!(
        "  legacy handler   http://{} (ships an order per accepted call)",
        handler.addr
    );
    println!("  idemgate proxy   http://{}{NOTIFY_PATH}", app.proxy_addr);
    println!("  idemgate admin   http://{}/metrics", app.admin_addr);
    println!(
        "  embedded store   {}",
        workdir.join("idemgate.redb").display()
    );
    println!(
        "  route payments   hex HMAC-SHA256 of the body, 5 min window, key = paymentNo + status"
    );
    println!();
}

/// `1 x a, 2 x b` style summary of the answers, in order of first appearance.
fn describe(seen: &[Seen]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for label in seen.iter().map(Seen::label) {
        match counts.iter_mut().find(|(l, _)| *l == label) {
            Some((_, count)) => *count += 1,
            None => counts.push((label, 1)),
        }
    }
    counts
        .into_iter()
        .map(|(label, count)| match count {
            1 => label,
            _ => format!("{count} x {label}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_table(reports: &[Report]) {
    let header = [
        "#",
        "scenario",
        "sent",
        "backend calls",
        "orders shipped",
        "idemgate answered",
        "verdict",
    ];
    let rows: Vec<[String; 7]> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            [
                (i + 1).to_string(),
                r.title.to_owned(),
                r.sent.to_string(),
                r.calls.to_string(),
                r.shipped.to_string(),
                describe(&r.seen),
                if r.ok() { "ok" } else { "FAILED" }.to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let numeric = [true, false, true, true, true, false, false];
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .zip(numeric)
            .map(|((cell, width), right)| {
                if right {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(&header.map(str::to_owned));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", rule.join("  "));
    for row in &rows {
        line(row);
    }
    println!();
    println!("forwarded: the handler's live answer (Idempotent-Replayed: false)");
    println!("replayed:  idemgate's stored copy of it, byte for byte (Idempotent-Replayed: true)");
    println!("401 …:     idemgate's problem+json rejection; the handler never saw the request");
    for (i, report) in reports.iter().enumerate() {
        for problem in &report.problems {
            println!("  scenario {}: {problem}", i + 1);
        }
    }
}

/// Prints the closing line; returns whether every scenario was ok.
fn print_summary(reports: &[Report]) -> bool {
    let sent: usize = reports.iter().map(|r| r.sent).sum();
    let calls: u32 = reports.iter().map(|r| r.calls).sum();
    let shipped: u32 = reports.iter().map(|r| r.shipped).sum();
    let failed = reports.iter().filter(|r| !r.ok()).count();
    println!();
    if failed == 0 {
        println!(
            "all {} scenarios ok: {sent} deliveries sent, {calls} reached the handler, \
             {shipped} orders shipped (one per genuine payment), nothing shipped twice",
            reports.len()
        );
    } else {
        println!(
            "{failed} of {} scenarios FAILED: {sent} deliveries sent, {calls} reached the handler, \
             {shipped} orders shipped",
            reports.len()
        );
    }
    failed == 0
}
