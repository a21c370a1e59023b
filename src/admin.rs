//! The admin listener: `/metrics`, `/healthz`, `/readyz`.
//!
//! Kept on its own address so probes and scrapes never compete with
//! deliveries, and so it can stay private while the proxy port faces
//! senders.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::pipeline::body_of;
use crate::pipeline::forward::ProxyBody;
use crate::store::{AnyStore, Store};

/// How long `/readyz` waits for the store before calling it down.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// State the admin endpoints read.
#[derive(Debug)]
pub struct Admin {
    store: Arc<AnyStore>,
    metrics: Option<PrometheusHandle>,
}

impl Admin {
    /// An admin handler over the shared store and the metrics handle.
    pub fn new(store: Arc<AnyStore>, metrics: Option<PrometheusHandle>) -> Self {
        Self { store, metrics }
    }

    /// Answers one admin request.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let text = |status: StatusCode, body: String| {
            let mut response = Response::new(body_of(body));
            *response.status_mut() = status;
            response
        };
        if request.method() != Method::GET {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed\n".into(),
            );
        }
        match request.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n".into()),
            "/readyz" => match tokio::time::timeout(READY_TIMEOUT, self.store.ping()).await {
                Ok(Ok(())) => text(StatusCode::OK, "ready\n".into()),
                Ok(Err(error)) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
                Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "store timed out\n".into()),
            },
            "/metrics" => match &self.metrics {
                Some(handle) => {
                    let mut response = text(StatusCode::OK, handle.render());
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static("text/plain; version=0.0.4"),
                    );
                    response
                }
                None => text(
                    StatusCode::NOT_FOUND,
                    "metrics recorder not installed\n".into(),
                ),
            },
            _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
        }
    }
}
