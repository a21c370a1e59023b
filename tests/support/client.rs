//! HTTP clients: [`send`] and the pooled [`Sender`], [`http_get`] for
//! polling, and raw HTTP/1.1 exchanges that no client normalises.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::{Upstream, eventually, signed};

/// A whole answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn replayed(&self) -> Option<&str> {
        self.headers
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (panics with the answer when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    /// The `reason` member of a problem+json answer.
    pub fn reason(&self) -> Option<String> {
        let doc: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        doc.get("reason")?.as_str().map(str::to_owned)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Upper bound of one exchange made by [`Sender::deliver`].
pub const REQUEST_LIMIT: Duration = Duration::from_secs(15);

/// One pooled HTTP client: share it among the deliveries of a test.
#[derive(Clone)]
pub struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new()
    }
}

impl Sender {
    pub fn new() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        }
    }

    /// Sends a request and reads the whole answer; a failure is returned,
    /// not a panic.
    pub async fn exchange(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: impl Into<Bytes>,
    ) -> Result<Answer, String> {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request
            .body(Full::new(body.into()))
            .map_err(|e| e.to_string())?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let (head, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Answer {
            status: head.status.as_u16(),
            headers: head.headers,
            body,
        })
    }

    /// POSTs a freshly signed delivery, bounded by [`REQUEST_LIMIT`].
    pub async fn deliver(&self, url: &str, body: &str) -> Result<Answer, String> {
        tokio::time::timeout(
            REQUEST_LIMIT,
            self.exchange("POST", url, &signed(body), body.to_owned()),
        )
        .await
        .map_err(|_| "no answer in time".to_owned())?
    }
}

/// Sends a request on a fresh client and reads the whole answer.
pub async fn send(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: impl Into<Bytes>,
) -> Answer {
    Sender::new()
        .exchange(method, url, headers, body)
        .await
        .expect("request sent")
}

/// GET `url`: (status, body); `Err` on connection failure or after 10 s,
/// never a panic (so it can poll a server that is still starting).
pub async fn http_get(url: &str) -> Result<(u16, String), String> {
    let sender = Sender::new();
    let exchange = sender.exchange("GET", url, &[], Bytes::new());
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| format!("GET {url} timed out"))??;
    Ok((
        answer.status,
        String::from_utf8_lossy(&answer.body).into_owned(),
    ))
}

/// [`http_get`] of `path` on `addr` from synchronous code; `None` if
/// nothing answers.
pub fn http_get_blocking(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(http_get(&format!("http://{addr}{path}")))
        .ok()
}

/// GETs `path` on an admin listener: (status, body).
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let answer = send("GET", &format!("http://{admin}{path}"), &[], "").await;
    (
        answer.status,
        String::from_utf8_lossy(&answer.body).into_owned(),
    )
}

/// DELETEs `path` on an admin listener with `token` as its bearer token
/// (a record purge: `/admin/records/{route}/{key}`).
pub async fn admin_delete(admin: SocketAddr, path: &str, token: &str) -> Answer {
    admin_call("DELETE", admin, path, token).await
}

/// `method path` on the admin listener at `admin` with the bearer `token`.
pub async fn admin_call(method: &str, admin: SocketAddr, path: &str, token: &str) -> Answer {
    send(
        method,
        &format!("http://{admin}{path}"),
        &[("authorization".to_owned(), format!("Bearer {token}"))],
        "",
    )
    .await
}

/// POSTs a freshly signed form-encoded delivery to the gate.
pub async fn deliver_form(url: &str, body: &str) -> Answer {
    send("POST", url, &super::as_form(signed(body)), body.to_owned()).await
}

/// POSTs a freshly signed delivery to the gate.
pub async fn deliver(url: &str, body: &str) -> Answer {
    send("POST", url, &signed(body), body.to_owned()).await
}

/// Delivers `body` again every 100 ms until it is answered 200 or `limit`
/// has passed; the last answer. For waiting out a condition that refuses
/// deliveries for a while (a spent budget, a store coming back).
pub async fn deliver_until_served(url: &str, body: &str, limit: Duration) -> Answer {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let answer = deliver(url, body).await;
        if answer.status == 200 || std::time::Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `body` to `url` in the background and returns once the upstream
/// has received call number `calls` (1-based): a first delivery caught
/// mid-flight, for tests that break something while it runs. A 503
/// `store_unavailable` before the upstream was reached (a loaded machine's
/// store or replica slower than the gate's timeout: nothing was forwarded)
/// is sent again, as a sender would.
pub async fn deliver_while_upstream_works(
    url: String,
    body: &str,
    upstream: &Upstream,
    calls: usize,
) -> tokio::task::JoinHandle<Answer> {
    let body = body.to_owned();
    let reached = upstream.call_count();
    let delivery = tokio::spawn(async move {
        let mut answer = deliver(&url, &body).await;
        for _ in 0..20 {
            let refused =
                answer.status == 503 && answer.reason().as_deref() == Some("store_unavailable");
            if !refused || reached.load(std::sync::atomic::Ordering::SeqCst) >= calls {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            answer = deliver(&url, &body).await;
        }
        answer
    });
    assert!(
        eventually(Duration::from_secs(5), || upstream.calls() >= calls).await,
        "the upstream never received the delivery"
    );
    delivery
}

/// Writes a complete signed delivery on a raw socket and hands the socket
/// back, so a test can hang up or wait as a real sender would.
pub async fn write_raw_delivery(addr: SocketAddr, body: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut head = format!(
        "POST /notify HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in signed(body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body.as_bytes()).await.expect("write body");
    stream
}

/// What a raw HTTP/1.1 exchange returned: the status (0 when the server
/// closed the connection without answering) and the body.
#[derive(Debug, Clone)]
pub struct RawAnswer {
    pub status: u16,
    pub body: Bytes,
}

impl RawAnswer {
    /// The `reason` member of a problem+json answer.
    pub fn reason(&self) -> Option<String> {
        let doc: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        doc.get("reason")?.as_str().map(str::to_owned)
    }
}

/// Sends `method target HTTP/1.1` with `headers` and `body` exactly as given
/// (no client normalises the method or the target) on a fresh connection
/// with `connection: close`, and reads the answer until the server closes
/// (at most 10 s).
pub async fn send_raw(
    addr: SocketAddr,
    method: &str,
    target: &[u8],
    headers: &[(String, String)],
    body: &str,
) -> RawAnswer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut head = Vec::new();
    head.extend_from_slice(method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(target);
    head.extend_from_slice(
        format!(
            " HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
            body.len()
        )
        .as_bytes(),
    );
    for (name, value) in headers {
        head.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(body.as_bytes());
    // The server may answer and close before reading everything (e.g. a
    // request line hyper refuses): a failed write is not an error here.
    let _ = stream.write_all(&head).await;
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await;
    assert!(read.is_ok(), "no answer within 10 s");
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| Bytes::copy_from_slice(&raw[at + 4..]))
        .unwrap_or_default();
    RawAnswer { status, body }
}

/// A TCP connection to `addr` from the loopback address `source`
/// (127.0.0.0/8 is all local on Linux): a peer of its own.
pub async fn connect_from(source: [u8; 4], addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .expect("bind a loopback source address");
    socket.connect(addr).await.expect("connect")
}
