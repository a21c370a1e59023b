//! Test harness: real parts on loopback, stopped by PID.
//!
//! * [`RedisServer`] — a real `redis-server` on a free 127.0.0.1 port, with
//!   `INFO commandstats` access through `redis-cli`.
//! * [`Upstream`] — a real HTTP server (hyper) that counts executions and
//!   answers as a test script says (status, delay).
//! * [`Gate`] — idemgate started in-process on port 0 from TOML text.
//! * [`GateProcess`] — the real `idemgate` binary, for crash tests.
//! * [`send`] / [`signed`] — an HTTP client and the signing scheme the
//!   test configs use.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use idemgate::app::RunningApp;
use idemgate::config::{Algorithm, Config};
use tokio::net::TcpListener;

/// Request headers as name/value pairs.
pub type Headers = Vec<(String, String)>;

/// The secret every test route uses.
pub const SECRET: &str = "test-secret";

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A real redis-server child process.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// With persistence: the AOF directory, kept across restarts.
    aof: Option<tempfile::TempDir>,
}

impl RedisServer {
    /// No persistence: a restart forgets everything.
    pub fn start() -> Self {
        Self::launch(None)
    }

    /// AOF with fsync on every write: a restart keeps every record.
    pub fn start_persistent() -> Self {
        Self::launch(Some(tempfile::tempdir().expect("tempdir")))
    }

    fn launch(aof: Option<tempfile::TempDir>) -> Self {
        let mut server = Self {
            port: free_port(),
            child: None,
            aof,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--protected-mode",
            "yes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match &self.aof {
            Some(dir) => args.extend(
                ["--appendonly", "yes", "--appendfsync", "always", "--dir"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([dir.path().display().to_string()]),
            ),
            None => args.extend(["--appendonly".to_owned(), "no".to_owned()]),
        }
        let child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.cli(&["PING"]).trim() == "PONG" {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Runs a redis-cli command and returns its raw output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli is installed");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `cmdstat_*` call counts from `INFO commandstats`.
    pub fn command_counts(&self) -> HashMap<String, u64> {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.trim().parse().ok()?))
            })
            .collect()
    }

    /// Calls of every command except the ones the harness itself sends and
    /// the eviction watcher's `CONFIG GET` / `INFO` reads.
    pub fn data_commands(&self) -> u64 {
        self.command_counts()
            .iter()
            .filter(|(name, _)| {
                !matches!(
                    name.as_str(),
                    "ping"
                        | "info"
                        | "config|resetstat"
                        | "config|get"
                        | "config"
                        | "client|setinfo"
                        | "client"
                        | "hello"
                        | "select"
                        | "command|docs"
                        | "command"
                )
            })
            .map(|(_, n)| *n)
            .sum()
    }

    /// `SET key value` with a binary value (redis-cli takes text
    /// arguments), over a plain RESP connection.
    pub fn set_bytes(&self, key: &str, value: &[u8]) {
        let mut command = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
            key.len(),
            value.len()
        )
        .into_bytes();
        command.extend_from_slice(value);
        command.extend_from_slice(b"\r\n");
        let reply = self.resp(&command);
        assert!(
            reply.starts_with(b"+OK"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }

    /// `GET key` as raw bytes (empty when absent).
    pub fn get_bytes(&self, key: &str) -> Vec<u8> {
        let command = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
        let reply = self.resp(command.as_bytes());
        let Some(header_end) = reply.windows(2).position(|w| w == b"\r\n") else {
            return Vec::new();
        };
        let len: i64 = String::from_utf8_lossy(&reply[1..header_end])
            .parse()
            .unwrap_or(-1);
        let Ok(len) = usize::try_from(len) else {
            return Vec::new();
        };
        reply[header_end + 2..header_end + 2 + len].to_vec()
    }

    /// Sends one RESP command and reads its reply: a simple line, or a bulk
    /// string with its payload (bounded: 5 s).
    fn resp(&self, command: &[u8]) -> Vec<u8> {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect redis");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(command).expect("send command");
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = reply.windows(2).position(|w| w == b"\r\n") {
                let bulk: Option<usize> = (reply[0] == b'$')
                    .then(|| String::from_utf8_lossy(&reply[1..end]).parse().ok())
                    .flatten();
                match bulk {
                    Some(len) if reply.len() < end + 2 + len + 2 => {}
                    _ => return reply,
                }
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return reply,
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// `CONFIG SET name value`; panics unless Redis answers OK.
    pub fn config_set(&self, name: &str, value: &str) {
        let out = self.cli(&["CONFIG", "SET", name, value]);
        assert_eq!(out.trim(), "OK", "CONFIG SET {name} {value}: {out}");
    }

    /// One `name:value` field of `INFO section`.
    pub fn info_field(&self, section: &str, name: &str) -> Option<String> {
        self.cli(&["INFO", section]).lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key == name).then(|| value.trim().to_owned())
        })
    }

    /// `evicted_keys` from `INFO stats`.
    pub fn evicted_keys(&self) -> u64 {
        self.info_field("stats", "evicted_keys")
            .and_then(|v| v.parse().ok())
            .expect("INFO stats has evicted_keys")
    }

    /// Writes batches of 10 kB junk keys (no TTL) through redis-cli until
    /// `done` holds; at most `max_batches` batches of 50 keys. Returns
    /// whether `done` held.
    pub fn fill_with_junk(&self, max_batches: usize, mut done: impl FnMut(&Self) -> bool) -> bool {
        const SCRIPT: &str = "for i = 1, tonumber(ARGV[2]) do \
             redis.call('SET', ARGV[1] .. i, string.rep('x', 10000)) end return 1";
        for batch in 0..max_batches {
            if done(self) {
                return true;
            }
            let prefix = format!("junk:{batch}:");
            self.cli(&["EVAL", SCRIPT, "0", &prefix, "50"]);
        }
        done(self)
    }

    pub fn reset_stats(&self) {
        self.cli(&["CONFIG", "RESETSTAT"]);
    }

    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.cli(&["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// SIGKILLs the server, keeping the port for `restart`.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the upstream does with one call.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub delay: Duration,
    /// The body to answer with; `None`: a small JSON naming the call.
    pub body: Option<Bytes>,
}

impl Reply {
    pub fn ok() -> Self {
        Self::status(200)
    }

    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
            body: None,
        }
    }

    pub fn slow(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::ok()
        }
    }

    /// 200 with `body` (for answers of a given size).
    pub fn with_body(body: Bytes) -> Self {
        Self {
            body: Some(body),
            ..Self::ok()
        }
    }
}

type Script = dyn Fn(usize, &Bytes) -> Reply + Send + Sync;

/// A real HTTP upstream that counts executions.
pub struct Upstream {
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    /// Method and request target of every call, as received.
    targets: Arc<Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Answers every call with 200 at once.
    pub async fn start() -> Self {
        Self::scripted(|_, _| Reply::ok()).await
    }

    /// The first call takes `delay`, every later one answers at once: a
    /// first attempt that times out or is cut, then healthy retries.
    pub async fn slow_first(delay: Duration) -> Self {
        Self::scripted(move |n, _| {
            if n == 0 {
                Reply::slow(delay)
            } else {
                Reply::ok()
            }
        })
        .await
    }

    /// Answers call `n` (0-based, counting every arrival) as `script` says.
    /// The body names the call number, so replays are recognisable.
    pub async fn scripted(script: impl Fn(usize, &Bytes) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let calls = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let targets = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let (c, b, t) = (
            Arc::clone(&calls),
            Arc::clone(&bodies),
            Arc::clone(&targets),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                let (calls, bodies, script) = (Arc::clone(&c), Arc::clone(&b), Arc::clone(&script));
                let targets = Arc::clone(&t);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            let (calls, bodies, script) =
                                (Arc::clone(&calls), Arc::clone(&bodies), Arc::clone(&script));
                            targets.lock().unwrap().push((
                                request.method().as_str().to_owned(),
                                request.uri().to_string(),
                            ));
                            async move {
                                let body = request
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|c| c.to_bytes())
                                    .unwrap_or_default();
                                let n = calls.fetch_add(1, Ordering::SeqCst);
                                bodies.lock().unwrap().push(body.clone());
                                let reply = script(n, &body);
                                tokio::time::sleep(reply.delay).await;
                                let body = reply.body.clone().unwrap_or_else(|| {
                                    Bytes::from(format!(
                                        "{{\"call\":{n},\"status\":{}}}",
                                        reply.status
                                    ))
                                });
                                let mut response = Response::new(Full::new(body));
                                *response.status_mut() =
                                    StatusCode::from_u16(reply.status).unwrap();
                                response
                                    .headers_mut()
                                    .insert("content-type", "application/json".parse().unwrap());
                                response
                                    .headers_mut()
                                    .insert("x-upstream-call", n.to_string().parse().unwrap());
                                Ok::<_, std::convert::Infallible>(response)
                            }
                        },
                    );
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            calls,
            bodies,
            targets,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many requests reached the upstream.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn bodies(&self) -> Vec<Bytes> {
        self.bodies.lock().unwrap().clone()
    }

    /// `(method, request target)` of every call, as the upstream received
    /// them: what "forwarded byte for byte" is checked against.
    pub fn targets(&self) -> Vec<(String, String)> {
        self.targets.lock().unwrap().clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A test configuration: one route `pay` on `/notify`, generic HMAC over
/// `{timestamp}.{body}` with the timestamp in `X-Timestamp` (seconds), key
/// `json:/id`. `store` is a `[store]` body; `extra` is appended to
/// `[route.idempotency]`.
pub fn config_text(store: &str, upstream: &str, extra: &str) -> String {
    format!(
        r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[limits]
shutdown_grace = "5s"

[store]
{store}

[upstream]
url = "{upstream}"
timeout = "5s"

[[route]]
name = "pay"
path_prefix = "/notify"

[route.signature]
scheme = "hmac"
secrets = ["literal:{SECRET}", "literal:previous-secret"]
signature = "header:X-Signature"
message = "{{timestamp}}.{{body}}"
timestamp = "header:X-Timestamp"
tolerance = "5m"

[route.idempotency]
key = ["json:/id"]
retention = "1h"
{extra}
"#
    )
}

pub fn redis_store(redis: &RedisServer) -> String {
    format!(
        "kind = \"redis\"\nurl = \"{}\"\ncommand_timeout = \"250ms\"",
        redis.url()
    )
}

pub fn embedded_store(path: &std::path::Path) -> String {
    format!("kind = \"embedded\"\npath = \"{}\"", path.display())
}

/// idemgate running in this process.
pub struct Gate {
    pub app: Option<RunningApp>,
    pub addr: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
}

impl Gate {
    pub async fn start(text: &str) -> Self {
        let config = Config::parse(text).expect("test config is valid");
        let app = idemgate::app::start(config, None)
            .await
            .expect("idemgate starts");
        Self {
            addr: app.proxy_addr,
            admin: app.admin_addr,
            app: Some(app),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn stop(mut self) {
        if let Some(app) = self.app.take() {
            app.stop().await;
        }
    }
}

/// The `idemgate` binary as a child process.
pub struct GateProcess {
    child: Child,
    pub addr: SocketAddr,
    /// The admin listener (/metrics, /healthz, /readyz, /admin/records).
    pub admin: SocketAddr,
    /// The configuration file it runs with.
    pub config_path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl GateProcess {
    /// Starts the binary with `text` (whose listen section is replaced by
    /// fresh ports) and waits until it accepts connections.
    pub fn start(text: &str) -> Self {
        Self::launch(text, &[], None)
    }

    /// Like `start`, with extra environment variables and, if `log` is
    /// given, debug-level logs written to that file.
    pub fn launch(text: &str, envs: &[(&str, &str)], log: Option<&std::path::Path>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let admin_port = free_port();
        let text = text
            .replace(
                "proxy = \"127.0.0.1:0\"",
                &format!("proxy = \"127.0.0.1:{port}\""),
            )
            .replace(
                "admin = \"127.0.0.1:0\"",
                &format!("admin = \"127.0.0.1:{admin_port}\""),
            );
        let path = dir.path().join("idemgate.toml");
        std::fs::write(&path, text).expect("write config");
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--config"])
            .arg(&path)
            .env("RUST_LOG", if log.is_some() { "debug" } else { "warn" })
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
                None => Stdio::null(),
            })
            .spawn()
            .expect("spawn idemgate");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "idemgate did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            addr,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
            config_path: path,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no shutdown, no cleanup.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("wait idemgate")
    }
}

impl Drop for GateProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// GETs `path` on an admin listener: (status, body).
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let answer = send("GET", &format!("http://{admin}{path}"), &[], "").await;
    (
        answer.status,
        String::from_utf8_lossy(&answer.body).into_owned(),
    )
}

/// The value of the sample `series` (a name, with its labels if it has
/// any) in the admin listener's `/metrics`, if present.
pub async fn metric(admin: SocketAddr, series: &str) -> Option<f64> {
    let (status, text) = admin_get(admin, "/metrics").await;
    assert_eq!(status, 200, "/metrics: {text}");
    sample(&text, series)
}

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

    /// The `reason` member of a problem+json answer.
    pub fn reason(&self) -> Option<String> {
        let doc: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        doc.get("reason")?.as_str().map(str::to_owned)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// Sends a request and reads the whole answer.
pub async fn send(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: impl Into<Bytes>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(body.into())).expect("request");
    let response = client().request(request).await.expect("request sent");
    let (head, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Answer {
        status: head.status.as_u16(),
        headers: head.headers,
        body,
    }
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Headers signing `body` at `timestamp` with `secret`, as the test route expects.
pub fn signed_with(secret: &str, timestamp: u64, body: &str) -> Headers {
    let ts = timestamp.to_string();
    let mac = idemgate::signature::mac(
        Algorithm::Sha256,
        secret.as_bytes(),
        &[ts.as_bytes(), b".", body.as_bytes()],
    );
    vec![
        ("x-signature".into(), hex::encode(mac)),
        ("x-timestamp".into(), ts),
        ("content-type".into(), "application/json".into()),
    ]
}

/// Headers signing `body` now with the route's secret.
pub fn signed(body: &str) -> Headers {
    signed_with(SECRET, now_secs(), body)
}

/// POSTs a freshly signed delivery to the gate.
pub async fn deliver(url: &str, body: &str) -> Answer {
    send("POST", url, &signed(body), body.to_owned()).await
}

/// Sends `body` to `url` in the background and returns once the upstream
/// has received call number `calls` (1-based): a first delivery caught
/// mid-flight, for tests that break something while it runs.
pub async fn deliver_while_upstream_works(
    url: String,
    body: &str,
    upstream: &Upstream,
    calls: usize,
) -> tokio::task::JoinHandle<Answer> {
    let body = body.to_owned();
    let delivery = tokio::spawn(async move { deliver(&url, &body).await });
    assert!(
        eventually(Duration::from_secs(5), || upstream.calls() >= calls).await,
        "the upstream never received the delivery"
    );
    delivery
}

/// A delivery body for payment `id`.
pub fn payment(id: &str) -> String {
    format!(r#"{{"id":"{id}","amount":"10.00","status":"PAID"}}"#)
}

/// The value of one sample line (`name{labels} value`) in a Prometheus
/// text exposition, matched on its full series text.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// Polls `condition` every 10 ms until it holds or `limit` passes.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
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

/// A route for a preset `scheme` on `/hook` with `secrets` (plain text, as
/// the sender's dashboard shows them).
pub fn preset_config_text(store: &str, upstream: &str, scheme: &str, secrets: &[&str]) -> String {
    let secrets: Vec<String> = secrets
        .iter()
        .map(|s| serde_json::to_string(&format!("literal:{s}")).unwrap())
        .collect();
    format!(
        r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
{store}

[upstream]
url = "{upstream}"
timeout = "5s"

[[route]]
name = "hook"
path_prefix = "/hook"

[route.signature]
scheme = "{scheme}"
secrets = [{}]
"#,
        secrets.join(", ")
    )
}

/// The headers a preset's sender puts on a delivery of `body`, signed with
/// `secret` at `timestamp` (seconds) for message/delivery `id`. Written from
/// the published algorithms (tests/vectors/ALGORITHMS.md), independently of
/// idemgate's verifier.
pub fn preset_headers(scheme: &str, secret: &str, timestamp: u64, id: &str, body: &str) -> Headers {
    use base64::Engine;
    let b64 = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let hmac =
        |key: &[u8], parts: &[&[u8]]| idemgate::signature::mac(Algorithm::Sha256, key, parts);
    let ts = timestamp.to_string();
    let pairs: Vec<(&str, String)> = match scheme {
        "standard-webhooks" | "svix" => {
            let key = base64::engine::general_purpose::STANDARD
                .decode(secret.trim_start_matches("whsec_"))
                .expect("whsec_ secret");
            let signature = b64(hmac(
                &key,
                &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()],
            ));
            let prefix = if scheme == "svix" { "svix" } else { "webhook" };
            return vec![
                (format!("{prefix}-id"), id.to_owned()),
                (format!("{prefix}-timestamp"), ts),
                (format!("{prefix}-signature"), format!("v1,{signature}")),
            ];
        }
        "stripe" => vec![(
            "stripe-signature",
            format!(
                "t={ts},v1={}",
                hex::encode(hmac(
                    secret.as_bytes(),
                    &[ts.as_bytes(), b".", body.as_bytes()]
                ))
            ),
        )],
        "github" => vec![
            (
                "x-hub-signature-256",
                format!(
                    "sha256={}",
                    hex::encode(hmac(secret.as_bytes(), &[body.as_bytes()]))
                ),
            ),
            ("x-github-delivery", id.to_owned()),
            ("x-github-event", "push".to_owned()),
        ],
        "slack" => vec![
            (
                "x-slack-signature",
                format!(
                    "v0={}",
                    hex::encode(hmac(
                        secret.as_bytes(),
                        &[b"v0:", ts.as_bytes(), b":", body.as_bytes()]
                    ))
                ),
            ),
            ("x-slack-request-timestamp", ts),
        ],
        "shopify" => vec![
            (
                "x-shopify-hmac-sha256",
                b64(hmac(secret.as_bytes(), &[body.as_bytes()])),
            ),
            ("x-shopify-topic", "orders/paid".to_owned()),
            ("x-shopify-shop-domain", "example.myshopify.com".to_owned()),
            ("x-shopify-api-version", "2025-07".to_owned()),
            ("x-shopify-webhook-id", id.to_owned()),
        ],
        other => panic!("no signer for {other}"),
    };
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A body carrying the ids the preset's default key reads.
pub fn preset_body(scheme: &str, id: &str) -> String {
    match scheme {
        "stripe" => format!(r#"{{"id":"{id}","type":"payment_intent.succeeded"}}"#),
        "slack" => format!(r#"{{"event_id":"{id}","type":"event_callback"}}"#),
        _ => format!(r#"{{"order":"{id}","status":"paid"}}"#),
    }
}
