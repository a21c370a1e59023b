//! The stored form of a handler's answer: what a record keeps of it, and
//! what a replay or an inbox's "last answer" shows.

use bytes::Bytes;
use http::header;

use super::{AnswerBody, UpstreamAnswer};
use crate::record::{StoredBody, StoredResponse};

/// The storable form of an answer. `Content-Length` is left out: hyper
/// recomputes the same value from the body on replay.
pub(crate) fn stored(answer: &UpstreamAnswer) -> StoredResponse {
    let headers = answer
        .headers
        .iter()
        .filter(|(name, _)| *name != header::CONTENT_LENGTH)
        .map(|(name, value)| {
            (
                Bytes::copy_from_slice(name.as_str().as_bytes()),
                Bytes::copy_from_slice(value.as_bytes()),
            )
        })
        .collect();
    let body = match &answer.body {
        AnswerBody::Buffered(bytes) => StoredBody::Kept(bytes.clone()),
        AnswerBody::Streaming(_) => StoredBody::TooLarge,
    };
    StoredResponse {
        status: answer.status.as_u16(),
        headers,
        body,
    }
}
