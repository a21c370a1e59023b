//! One admin API request over plain HTTP/1.1, with hyper-util's client
//! (the stack the upstream and trace exporter already use).
//!
//! Plain HTTP on purpose: the admin listener has no TLS and is meant to
//! stay private (loopback, a pod's own network namespace, a port-forward),
//! and the CLI runs beside it.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::CliError;
use super::access::Endpoint;

/// How long connecting may take before the listener counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one whole exchange may take (a listing reads the store).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read: far above a 500-item page.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// An answer the API gave, of any status: a refusal's body is its
/// problem document.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The body, whole.
    pub(crate) body: Bytes,
}

/// Calls the admin API at one endpoint.
#[derive(Debug)]
pub(crate) struct AdminClient {
    client: Client<HttpConnector, Full<Bytes>>,
    endpoint: Endpoint,
    /// Set once the endpoint answered as an admin listener
    /// ([`AdminClient::confirm_listener`]).
    confirmed: tokio::sync::OnceCell<()>,
}

impl AdminClient {
    /// A client for `endpoint`; one connection, kept for `--all`'s pages.
    pub(crate) fn new(endpoint: Endpoint) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Self {
            client,
            endpoint,
            confirmed: tokio::sync::OnceCell::new(),
        }
    }

    /// Makes sure the endpoint is an idemgate admin listener before the
    /// token goes to it: a `GET /healthz` without the token must come back
    /// with the listener header (`crate::admin::LISTENER_HEADER`). The
    /// proxy port, or anything else, would pass the token on.
    async fn confirm_listener(&self) -> Result<(), CliError> {
        let authority = &self.endpoint.authority;
        let (parts, _) = self.exchange(Method::GET, "/healthz", false).await?;
        let admin = parts
            .headers
            .get(crate::admin::LISTENER_HEADER)
            .is_some_and(|value| value == "admin");
        if admin {
            return Ok(());
        }
        Err(CliError::Unreachable(format!(
            "{authority} is not an idemgate admin listener (its /healthz answer ({}) does not \
             say so: is it the proxy port?); the token was not sent",
            parts.status
        )))
    }

    /// Sends `method` to `path_and_query` with the bearer token. An answer
    /// of any status is `Ok`; not reaching the listener, or no whole answer
    /// within [`EXCHANGE_TIMEOUT`], is [`CliError::Unreachable`].
    pub(crate) async fn call(
        &self,
        method: Method,
        path_and_query: &str,
    ) -> Result<Answer, CliError> {
        if self.endpoint.token.is_some() {
            self.confirmed
                .get_or_try_init(|| self.confirm_listener())
                .await?;
        }
        let (parts, body) = self.exchange(method, path_and_query, true).await?;
        Ok(Answer {
            status: parts.status,
            body,
        })
    }

    /// One exchange, with the bearer token when `with_token`.
    async fn exchange(
        &self,
        method: Method,
        path_and_query: &str,
        with_token: bool,
    ) -> Result<(http::response::Parts, Bytes), CliError> {
        let authority = &self.endpoint.authority;
        let uri = format!("http://{authority}{path_and_query}");
        let mut request = Request::builder()
            .method(method)
            .uri(&uri)
            .header(header::ACCEPT, "application/json, application/problem+json")
            .header(
                header::USER_AGENT,
                concat!("idemgate-admin/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::new()))
            .map_err(|e| CliError::Usage(format!("{uri}: {e}")))?;
        if let Some(token) = self.endpoint.token.as_ref().filter(|_| with_token) {
            let mut value = HeaderValue::from_bytes(&[b"Bearer ", &*token.expose()].concat())
                .map_err(|_| {
                    CliError::Usage("the admin token holds bytes a header cannot carry".into())
                })?;
            value.set_sensitive(true);
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| CliError::Unreachable(format!("{authority}: {}", chain(&e))))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    CliError::Unreachable(format!("{authority}: reading the answer: {e}"))
                })?
                .to_bytes();
            Ok((parts, body))
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                CliError::Unreachable(format!(
                    "{authority}: no answer within {EXCHANGE_TIMEOUT:?}"
                ))
            })?
    }
}

/// An error and its sources on one line: hyper-util's own message says
/// only "client error (Connect)", the cause says "Connection refused".
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
