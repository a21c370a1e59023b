//! Stage 2: read the request body, at most `limits.max_body_bytes`.
//!
//! A declared `Content-Length` over the limit is refused before a byte of
//! the body is read; a chunked body is cut off as soon as it crosses the
//! limit. Either way the answer is 413 `body_too_large`, and nothing is
//! buffered beyond the limit. A body that trickles in slower than
//! `limits.body_read_timeout` allows is cut off with 408 `body_timeout`.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::error::Rejection;
use crate::extract::Inbound;

/// Reads the whole body of `request` into an [`Inbound`], within
/// `timeout` (a slow-body sender gets 408 `body_timeout`).
pub(crate) async fn read(
    request: Request<Incoming>,
    limit: u64,
    timeout: std::time::Duration,
) -> Result<Inbound, Rejection> {
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(Rejection::BodyTooLarge);
    }
    let (parts, body) = request.into_parts();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let collected = tokio::time::timeout(timeout, Limited::new(body, limit).collect())
        .await
        .map_err(|_| Rejection::BodyTimeout)?;
    let body: Bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            return Err(Rejection::BodyTooLarge);
        }
        Err(_) => return Err(Rejection::BadRequestBody("a complete HTTP body")),
    };
    Ok(Inbound::new(parts, body))
}
