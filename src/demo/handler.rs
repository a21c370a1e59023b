//! The stand-in legacy handler: a tiny hyper server that ships an order for
//! every payment notification it accepts, with no deduplication of its own.
//!
//! It owns the ledger of calls and shipments per payment that the scenarios
//! check, so it is its own module: the "backend" side of the story, apart
//! from the sender and from idemgate in between.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// How the handler treats one payment.
#[derive(Debug, Clone, Copy)]
pub(super) enum Behaviour {
    /// Works this long before answering.
    Slow(Duration),
    /// Answers 500 (nothing shipped) to the first call, then works normally.
    FailFirst,
    /// Answers 503 (nothing shipped) while the handler is in maintenance,
    /// then works normally (see [`LegacyHandler::end_maintenance`]).
    Maintenance,
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
    /// Set until [`LegacyHandler::end_maintenance`].
    in_maintenance: AtomicBool,
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
pub(super) struct LegacyHandler {
    pub(super) addr: SocketAddr,
    state: Arc<HandlerState>,
    server: JoinHandle<()>,
}

impl LegacyHandler {
    pub(super) async fn start(
        behaviours: HashMap<&'static str, Behaviour>,
    ) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("binding the legacy handler: {error}"))?;
        let addr = listener
            .local_addr()
            .map_err(|error| format!("legacy handler address: {error}"))?;
        let state = Arc::new(HandlerState {
            behaviours,
            ledger: Mutex::default(),
            in_maintenance: AtomicBool::new(true),
        });
        let server = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(Self {
            addr,
            state,
            server,
        })
    }

    /// `(calls, orders shipped)` for one payment.
    pub(super) fn counts(&self, id: &str) -> (u32, u32) {
        let ledger = self.state.ledger();
        let calls = ledger.calls.get(id).copied().unwrap_or(0);
        let shipped = ledger.shipped.get(id).copied().unwrap_or(0);
        (calls, shipped)
    }

    /// Brings the handler back: payments with [`Behaviour::Maintenance`]
    /// ship from now on.
    pub(super) fn end_maintenance(&self) {
        self.state.in_maintenance.store(false, Ordering::SeqCst);
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
            // A connection the gateway drops mid-request (the hang-up
            // scenario does so on purpose) ends in an error: the demo
            // reports what the handler did, not how its connections ended.
            if let Err(error) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "demo handler connection ended");
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

/// The legacy handler's one endpoint.
async fn handle_notification(
    state: Arc<HandlerState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let Some((id, status)) = payment_number(request).await else {
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
        Some(Behaviour::Maintenance) if state.in_maintenance.load(Ordering::SeqCst) => {
            return Ok(json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({ "error": "maintenance, nothing shipped" }),
            ));
        }
        Some(Behaviour::FailFirst | Behaviour::Maintenance) | None => {}
    }
    // Only a success ships; any other notice is booked and acknowledged.
    if status != "SUCCESS" {
        return Ok(json_response(
            StatusCode::OK,
            &serde_json::json!({ "noted": id, "status": status }),
        ));
    }
    let order = state.ship(&id);
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "shipped": id, "order": order }),
    ))
}

/// The payment number and the announced status of a notification.
async fn payment_number(request: Request<Incoming>) -> Option<(String, String)> {
    let body = request.into_body().collect().await.ok()?.to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let status = json
        .get("status")
        .and_then(|s| s.as_str())
        .unwrap_or("SUCCESS");
    Some((
        json.get("paymentNo")?.as_str()?.to_owned(),
        status.to_owned(),
    ))
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
