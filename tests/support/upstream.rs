//! [`Upstream`]: a real HTTP upstream (hyper) on a free loopback port that
//! counts executions and answers as a test script says ([`Reply`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

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
    /// The request headers of every call, as received.
    headers: Arc<Mutex<Vec<http::HeaderMap>>>,
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
        Self::serve(listener, script)
    }

    /// Like [`Upstream::scripted`], on loopback port `port`: a handler that
    /// comes back where idemgate was told it lives after being down.
    pub async fn scripted_at(
        port: u16,
        script: impl Fn(usize, &Bytes) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind upstream on its port");
        Self::serve(listener, script)
    }

    fn serve(
        listener: TcpListener,
        script: impl Fn(usize, &Bytes) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let addr = listener.local_addr().expect("upstream addr");
        let calls = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let targets = Arc::new(Mutex::new(Vec::new()));
        let headers = Arc::new(Mutex::new(Vec::new()));
        let seen_headers = Arc::clone(&headers);
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
                let seen_headers = Arc::clone(&seen_headers);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            let (calls, bodies, script) =
                                (Arc::clone(&calls), Arc::clone(&bodies), Arc::clone(&script));
                            targets.lock().unwrap().push((
                                request.method().as_str().to_owned(),
                                request.uri().to_string(),
                            ));
                            seen_headers.lock().unwrap().push(request.headers().clone());
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
            headers,
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

    /// The call count itself, for a task that must read it while the
    /// upstream stays with the test.
    pub fn call_count(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.calls)
    }

    pub fn bodies(&self) -> Vec<Bytes> {
        self.bodies.lock().unwrap().clone()
    }

    /// `(method, request target)` of every call, as the upstream received
    /// them: what "forwarded byte for byte" is checked against.
    pub fn targets(&self) -> Vec<(String, String)> {
        self.targets.lock().unwrap().clone()
    }

    /// The request headers of every call, in arrival order.
    pub fn headers(&self) -> Vec<http::HeaderMap> {
        self.headers.lock().unwrap().clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
