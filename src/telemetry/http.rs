//! The HTTP client the OTLP exporter posts spans with: hyper, already in
//! the binary for the upstream, instead of a second HTTP stack (reqwest)
//! only for telemetry.
//!
//! Runs on the export thread's own runtime ([`super::queue`]); every call
//! is bounded by the export timeout, body read included, and the answer
//! body is read only up to [`MAX_ANSWER_BYTES`].

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::{HttpClient, HttpError};

/// A collector's answer is a small protobuf (partial success at most).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// An OTLP/HTTP client over hyper (plain HTTP/1.1, kept-alive connection).
#[derive(Debug, Clone)]
pub(super) struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Client {
    /// A client whose every call ends within `timeout`.
    pub(super) fn new(timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let inner = HyperClient::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Self { inner, timeout }
    }

    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let response = self
            .inner
            .request(Request::from_parts(parts, Full::new(body)))
            .await?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_ANSWER_BYTES).collect().await?;
        Ok(Response::from_parts(parts, body.to_bytes()))
    }
}

/// Timed out before the collector answered.
#[derive(Debug, thiserror::Error)]
#[error("the collector did not answer within {0:?}")]
struct TimedOut(Duration);

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        match tokio::time::timeout(self.timeout, self.send(request)).await {
            Ok(result) => result,
            Err(_) => Err(Box::new(TimedOut(self.timeout))),
        }
    }
}
