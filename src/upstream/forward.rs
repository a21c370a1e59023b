//! Send a request to the handler through the one pooled client (stage 6
//! of the pipeline, and every inbox redelivery).
//!
//! The request is re-framed by hyper (never passed through raw): hop-by-hop
//! headers (RFC 9110 §7.6.1: `Connection` and every header it lists,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`,
//! `Upgrade`) are dropped, `X-Forwarded-For` gets the sender's address, and
//! the whole exchange including the response body is bounded by
//! `upstream.timeout`.
//!
//! A protected answer is read up to `limits.max_stored_answer_bytes`
//! ([`AnswerBody::Buffered`], storable); a larger one is never buffered
//! whole: what was read is sent on, followed by the rest as it arrives
//! ([`AnswerBody::Streaming`]), and only its status and headers are kept.
//!
//! Failures are sorted by what they mean for idempotency: a refused
//! connection ([`ForwardError::Refused`]) sent nothing, so the claim can be
//! released; a connection that broke after the request may have been
//! written ([`ForwardError::Broken`]) and a timeout leave the outcome
//! unknown.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::quick_ack::QuickAckConnector;
use crate::body::{ProxyBody, full};
use crate::config::Upstream;
use crate::error::Rejection;

/// The pooled upstream client, cloned cheaply per request.
pub(crate) type UpstreamClient = Client<QuickAckConnector, ProxyBody>;

/// Builds the shared client: keep-alive pool, no per-request connection,
/// `TCP_NODELAY` for our writes, and `TCP_QUICKACK` on connections whose
/// backend needs it (see [`super::quick_ack`]).
pub(crate) fn client() -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(QuickAckConnector::new(connector))
}

/// An upstream answer whose body was read as far as it may be stored.
#[derive(Debug)]
pub(crate) struct UpstreamAnswer {
    /// Status code.
    pub status: StatusCode,
    /// Headers, hop-by-hop ones removed.
    pub headers: HeaderMap,
    /// The body, whole or streaming (see [`AnswerBody`]).
    pub body: AnswerBody,
}

/// An answer's body, read up to the storable size.
#[derive(Debug)]
pub(crate) enum AnswerBody {
    /// The whole body, at most `max_stored_answer_bytes`: storable.
    Buffered(Bytes),
    /// A larger body: the part already read, then the rest from the
    /// upstream. Sent on, never stored.
    Streaming(ProxyBody),
}

impl AnswerBody {
    /// The body as the sender receives it.
    pub(crate) fn into_proxy_body(self) -> ProxyBody {
        match self {
            Self::Buffered(bytes) => full(bytes),
            Self::Streaming(body) => body,
        }
    }
}

/// Why no answer came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ForwardError {
    /// Connection refused before anything was sent: a clean failure.
    #[error("upstream refused the connection")]
    Refused,
    /// The connection failed after the request may have been written.
    #[error("upstream connection broke")]
    Broken,
    /// No complete answer within `upstream.timeout`.
    #[error("upstream timed out")]
    Timeout,
}

impl ForwardError {
    /// Sorts a client error: only a failed connect is known to have sent
    /// nothing; any later failure may have reached the upstream.
    fn from_client(error: &hyper_util::client::legacy::Error) -> Self {
        if error.is_connect() {
            Self::Refused
        } else {
            Self::Broken
        }
    }

    /// The class of failure as the `forward` span's `error.type`
    /// (OpenTelemetry semantic conventions: low cardinality, documented
    /// in docs/tracing.md).
    pub(crate) fn error_type(self) -> &'static str {
        match self {
            Self::Refused => "connect",
            Self::Broken => "connection_broken",
            Self::Timeout => "timeout",
        }
    }

    /// The rejection the sender gets instead of an answer: 504 for a
    /// timeout, 502 for any connection failure.
    pub(crate) fn rejection(self) -> Rejection {
        match self {
            Self::Refused | Self::Broken => Rejection::UpstreamError,
            Self::Timeout => Rejection::UpstreamTimeout,
        }
    }
}

/// Removes hop-by-hop headers, including those named in `Connection`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

/// The upstream URI for a request path: base URL + path + query.
pub(crate) fn target(upstream: &Uri, path_and_query: Option<&PathAndQuery>) -> Uri {
    let base_path = upstream.path().trim_end_matches('/');
    let mut builder = Uri::builder();
    if let Some(scheme) = upstream.scheme() {
        builder = builder.scheme(scheme.clone());
    }
    if let Some(authority) = upstream.authority() {
        builder = builder.authority(authority.clone());
    }
    let built = match (base_path, path_and_query) {
        // The common case, an upstream without a base path: the sender's
        // path is reused as is (a cheap clone, no formatting or re-parsing).
        ("", Some(pq)) => builder.path_and_query(pq.clone()).build(),
        (_, pq) => {
            let tail = pq.map_or("/", PathAndQuery::as_str);
            builder.path_and_query(format!("{base_path}{tail}")).build()
        }
    };
    built.unwrap_or_else(|_| upstream.clone())
}

/// The header that names the sender's address to the handler.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The `X-Forwarded-For` a request from `peer` carrying `headers` is
/// forwarded with: the sender's own value, then `peer`. The inbox keeps it
/// with the request, so a redelivery names the same sender as the live
/// attempt did.
pub(crate) fn forwarded_for(headers: &HeaderMap, peer: SocketAddr) -> Option<HeaderValue> {
    let forwarded = match headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    HeaderValue::from_str(&forwarded).ok()
}

/// Turns the sender's head into the upstream request's head (its header
/// map is reused, not copied).
pub(crate) fn upstream_request(
    parts: http::request::Parts,
    upstream: &Uri,
    peer: Option<SocketAddr>,
    body: ProxyBody,
) -> Request<ProxyBody> {
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    if let Some(value) = peer.and_then(|peer| forwarded_for(&headers, peer)) {
        headers.insert(X_FORWARDED_FOR, value);
    }
    let mut request = Request::new(body);
    *request.method_mut() = parts.method;
    *request.uri_mut() = target(upstream, parts.uri.path_and_query());
    *request.headers_mut() = headers;
    request
}

/// Sends a buffered request and reads the answer up to `max_stored`
/// bytes, within `upstream.timeout` (a streaming remainder is not timed).
pub(crate) async fn forward(
    client: &UpstreamClient,
    upstream: &Upstream,
    parts: http::request::Parts,
    body: Bytes,
    peer: Option<SocketAddr>,
    max_stored: usize,
) -> Result<UpstreamAnswer, ForwardError> {
    let request = upstream_request(parts, &upstream.url, peer, full(body));
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|error| ForwardError::from_client(&error))?;
        let (head, body) = response.into_parts();
        let body = read_bounded(body, max_stored).await?;
        let mut headers = head.headers;
        strip_hop_by_hop(&mut headers);
        Ok(UpstreamAnswer {
            status: head.status,
            headers,
            body,
        })
    };
    tokio::time::timeout(upstream.timeout, exchange)
        .await
        .unwrap_or(Err(ForwardError::Timeout))
}

/// Reads `body` whole if it is at most `limit` bytes; otherwise returns
/// what was read chained to the rest. An answer that announces a larger
/// `Content-Length` is not read at all before it streams.
async fn read_bounded(mut body: Incoming, limit: usize) -> Result<AnswerBody, ForwardError> {
    let limit = u64::try_from(limit).unwrap_or(u64::MAX);
    if body.size_hint().lower() > limit {
        return Ok(AnswerBody::Streaming(body.boxed()));
    }
    // Chunks are kept as they came: the common one-chunk answer is never copied.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut read: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ForwardError::Broken)?;
        // Trailers are hop-by-hop for a buffered answer: not kept.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read += data.len() as u64;
        chunks.push(data);
        if read > limit {
            let prefix = concat(chunks);
            return Ok(AnswerBody::Streaming(
                Prefixed {
                    prefix: Some(prefix),
                    rest: body,
                }
                .boxed(),
            ));
        }
    }
    Ok(AnswerBody::Buffered(concat(chunks)))
}

fn concat(mut chunks: Vec<Bytes>) -> Bytes {
    if chunks.len() <= 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut joined = bytes::BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
    for chunk in chunks {
        joined.extend_from_slice(&chunk);
    }
    joined.freeze()
}

/// A body that sends what was already read, then the rest of the upstream's.
#[derive(Debug)]
struct Prefixed {
    prefix: Option<Bytes>,
    rest: Incoming,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let extra = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(extra));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(extra));
        }
        hint
    }
}

/// Forwards a request untouched for unmatched routes: its body streamed
/// as it arrives, or one stage 1 had to read first (a form body whose
/// `_method` field it checked).
pub(crate) async fn pass_through(
    client: &UpstreamClient,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    peer: Option<SocketAddr>,
) -> Result<Response<ProxyBody>, ForwardError> {
    let (parts, body) = request.into_parts();
    let request = upstream_request(parts, &upstream.url, peer, body);
    let response = tokio::time::timeout(upstream.timeout, client.request(request))
        .await
        .map_err(|_| ForwardError::Timeout)?
        .map_err(|error| ForwardError::from_client(&error))?;
    let (mut head, body) = response.into_parts();
    strip_hop_by_hop(&mut head.headers);
    Ok(Response::from_parts(head, body.boxed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
        headers.insert("x-keep", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers["x-keep"], "yes");
    }

    #[test]
    fn targets_keep_base_path_and_query() {
        let base: Uri = "http://127.0.0.1:3000/legacy/".parse().unwrap();
        let pq: http::uri::PathAndQuery = "/notify?a=1".parse().unwrap();
        assert_eq!(
            target(&base, Some(&pq)).to_string(),
            "http://127.0.0.1:3000/legacy/notify?a=1"
        );
        let root: Uri = "http://127.0.0.1:3000".parse().unwrap();
        assert_eq!(
            target(&root, Some(&pq)).to_string(),
            "http://127.0.0.1:3000/notify?a=1"
        );
    }
}
