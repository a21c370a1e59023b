//! Stage 2: read the request body, at most `limits.max_body_bytes`.
//!
//! A declared `Content-Length` over the limit is refused before a byte of
//! the body is read; a chunked body is cut off as soon as it crosses the
//! limit. Either way the answer is 413 `body_too_large`, and nothing is
//! buffered beyond the limit. A body that trickles in slower than
//! `limits.body_read_timeout` allows is cut off with 408 `body_timeout`.
//! Every chunk is reserved from the process-wide [`Budget`] as it arrives,
//! in the sending peer's share of it; one that does not fit is refused
//! with 503 `over_capacity`.

use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::budget::{Budget, Reserved};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The address a request came from, as the listener saw it: put in the
/// request's extensions by [`crate::pipeline::Pipeline::handle`], read here
/// for the peer's share of the budget (`crate::peers`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) IpAddr);

/// How to read one body: the per-request bounds and the shared budget.
#[derive(Debug, Clone)]
pub(crate) struct BodyLimits {
    /// Largest body accepted (`limits.max_body_bytes`).
    pub(crate) max_bytes: u64,
    /// Time allowed for the whole body (`limits.body_read_timeout`).
    pub(crate) timeout: std::time::Duration,
    /// Bytes of all bodies at once (`limits.max_buffered_bytes`).
    pub(crate) budget: Budget,
}

/// Reads the whole body of `request` into an [`Inbound`] that holds its
/// bytes' share of the budget, within `limits`.
pub(crate) async fn read(
    request: Request<Incoming>,
    limits: &BodyLimits,
) -> Result<Inbound, Rejection> {
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_bytes) {
        return Err(Rejection::BodyTooLarge);
    }
    let peer = request.extensions().get::<Peer>().map(|peer| peer.0);
    let (parts, body) = request.into_parts();
    let (body, reserved) = tokio::time::timeout(limits.timeout, collect(body, limits, peer))
        .await
        .map_err(|_| Rejection::BodyTimeout)??;
    Ok(Inbound::new(parts, body).holding(reserved))
}

/// The body's bytes, each chunk reserved from the budget before it is
/// kept. A body in one chunk (the usual case) is kept without a copy.
async fn collect(
    mut body: Incoming,
    limits: &BodyLimits,
    peer: Option<IpAddr>,
) -> Result<(Bytes, Reserved), Rejection> {
    let limit = usize::try_from(limits.max_bytes).unwrap_or(usize::MAX);
    let mut reserved = Reserved::default();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut length = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Rejection::BadRequestBody("a complete HTTP body"))?;
        let Ok(chunk) = frame.into_data() else {
            continue; // trailers carry nothing idemgate reads
        };
        length = length.saturating_add(chunk.len());
        if length > limit {
            return Err(Rejection::BodyTooLarge);
        }
        limits.budget.reserve(&mut reserved, chunk.len(), peer)?;
        chunks.push(chunk);
    }
    let body = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut joined = BytesMut::with_capacity(length);
            for chunk in &chunks {
                joined.extend_from_slice(chunk);
            }
            joined.freeze()
        }
    };
    Ok((body, reserved))
}
