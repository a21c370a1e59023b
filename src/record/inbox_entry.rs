//! The inbox section of a record (state 5): a delivery the handler could
//! not take, its request and how far its redelivery has come.
//!
//! ```text
//! (after the ack, in the completed-answer layout)
//! 1      stage: 1 queued, 2 delivering, 3 delivered, 4 dead, 5 unknown, 6 dropped
//! 4      attempts: redeliveries started so far
//! 4      limit: the attempt count at which a failure makes it dead
//! 8      due: unix ms (queued: next attempt; delivering: visibility deadline)
//! 2+n    route name
//! 2+n    last error (empty when none)
//! 1      1 if the handler's last answer follows (in the answer layout)
//! 2+n    request method
//! 4+n    request target (path and query, as received)
//! 2      header count, then per header u16 name length, name, u32 value length, value
//! 4+n    request body
//! 4      probes of the handler about an unknown outcome ([route.probe]);
//!        only when not 0, so a record without any reads as before
//! ```
//!
//! Workers change a record only by rewriting it whole through an
//! owner-fenced swap (`store::inbox`), so no offset here is read by a
//! script.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    Cursor, DecodeError, StoredResponse, TooLong, prefix, put_block, put_headers, put_response,
    read_response, response_len,
};

/// Longest last-error text kept, in bytes: enough for any error message,
/// bounded so a record never grows with an upstream's whims.
const MAX_ERROR_LEN: usize = 512;

/// How long a record whose delivery is not resolved is kept: a hundred
/// years, which is to say until a worker or an operator resolves it. An
/// acknowledged delivery must not expire while it waits, however long the
/// backlog, the outage or the operator takes (a TTL rather than none, so
/// both stores keep one expiry rule).
pub const UNRESOLVED_KEPT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Where a queued delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for its next attempt (`due`).
    Queued,
    /// A worker owns it and is calling the handler until `due`.
    Delivering,
    /// The handler took it; its answer is `last_answer`.
    Delivered,
    /// Every attempt failed; kept for the operator.
    Dead,
    /// A redelivery timed out or its worker died mid-call: the handler may
    /// have acted. Withheld for the operator, never resent automatically.
    Unknown,
    /// An operator resolved it without sending.
    Dropped,
}

impl Stage {
    /// The word the admin API and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Delivering => "delivering",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
            Self::Unknown => "unknown",
            Self::Dropped => "dropped",
        }
    }

    /// Whether a worker may still act on it by itself.
    pub fn is_pending(self) -> bool {
        matches!(self, Self::Queued | Self::Delivering)
    }

    /// Whether it waits for an operator (listed with `state=dead`).
    pub fn is_held(self) -> bool {
        matches!(self, Self::Dead | Self::Unknown)
    }

    /// Whether nothing is left to do: the handler took it, or an operator
    /// dropped it. Only then does the route's retention start.
    pub fn is_resolved(self) -> bool {
        matches!(self, Self::Delivered | Self::Dropped)
    }

    /// How long a record written in this stage is kept: `retention` once
    /// resolved, [`UNRESOLVED_KEPT`] before.
    pub fn kept_for(self, retention: Duration) -> Duration {
        if self.is_resolved() {
            retention
        } else {
            UNRESOLVED_KEPT
        }
    }

    fn byte(self) -> u8 {
        match self {
            Self::Queued => 1,
            Self::Delivering => 2,
            Self::Delivered => 3,
            Self::Dead => 4,
            Self::Unknown => 5,
            Self::Dropped => 6,
        }
    }

    fn from_byte(byte: u8) -> Result<Self, DecodeError> {
        Ok(match byte {
            1 => Self::Queued,
            2 => Self::Delivering,
            3 => Self::Delivered,
            4 => Self::Dead,
            5 => Self::Unknown,
            6 => Self::Dropped,
            other => return Err(DecodeError::State(other)),
        })
    }
}

/// A request as the sender sent it, kept to send it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    /// The method.
    pub method: Bytes,
    /// Path and query, byte for byte as received.
    pub target: Bytes,
    /// Every header as received, in order.
    pub headers: Vec<(Bytes, Bytes)>,
    /// The body.
    pub body: Bytes,
}

impl StoredRequest {
    /// Captures a buffered request.
    pub fn capture(parts: &http::request::Parts, body: Bytes) -> Self {
        let target = parts.uri.path_and_query().map_or_else(
            || Bytes::from_static(b"/"),
            |pq| Bytes::copy_from_slice(pq.as_str().as_bytes()),
        );
        Self {
            method: Bytes::copy_from_slice(parts.method.as_str().as_bytes()),
            target,
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        Bytes::copy_from_slice(name.as_str().as_bytes()),
                        Bytes::copy_from_slice(value.as_bytes()),
                    )
                })
                .collect(),
            body,
        }
    }

    /// The same request with every `name` header replaced by one `value`.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: &[u8]) -> Self {
        self.headers
            .retain(|(existing, _)| !existing.eq_ignore_ascii_case(name.as_bytes()));
        self.headers.push((
            Bytes::copy_from_slice(name.as_bytes()),
            Bytes::copy_from_slice(value),
        ));
        self
    }

    /// The request again, ready for the forwarding stage; `None` if a
    /// stored part no longer parses (a record from a foreign writer).
    pub fn to_parts(&self) -> Option<http::request::Parts> {
        let mut builder = http::Request::builder()
            .method(http::Method::from_bytes(&self.method).ok()?)
            .uri(http::Uri::from_maybe_shared(self.target.clone()).ok()?);
        for (name, value) in &self.headers {
            builder = builder.header(
                http::HeaderName::from_bytes(name).ok()?,
                http::HeaderValue::from_bytes(value).ok()?,
            );
        }
        Some(builder.body(()).ok()?.into_parts().0)
    }
}

/// A delivery in the inbox: what its sender was told, the request, and
/// its redelivery progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The acknowledgement the sender got; every copy is told the same.
    pub ack: StoredResponse,
    /// Where it stands.
    pub stage: Stage,
    /// Redeliveries started so far.
    pub attempts: u32,
    /// The attempt count at which a failure makes it dead
    /// (`max_attempts`, or one more than `attempts` after a retry-now).
    pub limit: u32,
    /// Queued: when it is due. Delivering: when its worker's visibility
    /// ends. Otherwise when it reached its stage (unix ms).
    pub due_ms: u64,
    /// The route it arrived on: its upstream and inbox settings apply.
    pub route: String,
    /// Why the last attempt failed (empty if none did).
    pub last_error: String,
    /// The handler's last answer, if it gave one.
    pub last_answer: Option<StoredResponse>,
    /// The request to send.
    pub request: StoredRequest,
    /// Probes of the handler about its unknown outcome so far, on a route
    /// with `[route.probe]`: none before the first (then `due_ms`, when it
    /// turned unknown, plus `start_after` is when it is due), and while
    /// one runs `due_ms` is when its taker's lease ends.
    pub probes: u32,
}

impl InboxEntry {
    /// Sets the last error, cut to [`MAX_ERROR_LEN`] on a character
    /// boundary.
    pub fn set_error(&mut self, error: &str) {
        let mut end = error.len().min(MAX_ERROR_LEN);
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error[..end].clone_into(&mut self.last_error);
    }

    pub(super) fn encoded_len(&self) -> usize {
        let request = &self.request;
        17 + 2
            + self.route.len()
            + 2
            + self.last_error.len()
            + 1
            + self.last_answer.as_ref().map_or(0, response_len)
            + 2
            + request.method.len()
            + 4
            + request.target.len()
            + 2
            + request
                .headers
                .iter()
                .map(|(n, v)| 6 + n.len() + v.len())
                .sum::<usize>()
            + 4
            + request.body.len()
            + if self.probes > 0 { 4 } else { 0 }
    }

    pub(super) fn put(&self, out: &mut BytesMut) -> Result<(), TooLong> {
        out.put_u8(self.stage.byte());
        out.put_u32(self.attempts);
        out.put_u32(self.limit);
        out.put_u64(self.due_ms);
        put_short(out, "route", self.route.as_bytes())?;
        put_short(out, "last error", self.last_error.as_bytes())?;
        match &self.last_answer {
            Some(answer) => {
                out.put_u8(1);
                put_response(out, answer)?;
            }
            None => out.put_u8(0),
        }
        put_short(out, "method", &self.request.method)?;
        put_block(out, "request target", &self.request.target)?;
        put_headers(out, &self.request.headers)?;
        put_block(out, "request body", &self.request.body)?;
        if self.probes > 0 {
            out.put_u32(self.probes);
        }
        Ok(())
    }

    pub(super) fn read(cursor: &mut Cursor<'_>, ack: StoredResponse) -> Result<Self, DecodeError> {
        let stage = Stage::from_byte(cursor.u8()?)?;
        let attempts = cursor.u32()?;
        let limit = cursor.u32()?;
        let due_ms = cursor.u64()?;
        let route = text(&read_short(cursor)?)?;
        let last_error = text(&read_short(cursor)?)?;
        let last_answer = match cursor.u8()? {
            0 => None,
            1 => Some(read_response(cursor, true)?),
            other => return Err(DecodeError::State(other)),
        };
        let method = read_short(cursor)?;
        let target = cursor.block()?;
        let headers = cursor.headers()?;
        let body = cursor.block()?;
        // The inbox section ends the record: four more bytes are probes.
        let probes = if cursor.remaining() == 4 {
            cursor.u32()?
        } else {
            0
        };
        Ok(Self {
            ack,
            stage,
            attempts,
            limit,
            due_ms,
            route,
            last_error,
            last_answer,
            request: StoredRequest {
                method,
                target,
                headers,
                body,
            },
            probes,
        })
    }
}

/// Writes a u16 length, then the bytes.
fn put_short(out: &mut BytesMut, field: &'static str, bytes: &[u8]) -> Result<(), TooLong> {
    out.put_u16(prefix(field, bytes.len())?);
    out.put_slice(bytes);
    Ok(())
}

fn read_short(cursor: &mut Cursor<'_>) -> Result<Bytes, DecodeError> {
    let len = cursor.u16()?;
    cursor.take(usize::from(len))
}

fn text(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Truncated)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::{Record, RecordState, StoredBody};
    use proptest::prelude::*;

    #[test]
    fn only_a_resolved_delivery_starts_its_retention() {
        let retention = Duration::from_secs(4);
        for stage in [
            Stage::Queued,
            Stage::Delivering,
            Stage::Dead,
            Stage::Unknown,
        ] {
            assert_eq!(stage.kept_for(retention), UNRESOLVED_KEPT, "{stage:?}");
        }
        for stage in [Stage::Delivered, Stage::Dropped] {
            assert_eq!(stage.kept_for(retention), retention, "{stage:?}");
        }
        // Redis takes PX up to i64 milliseconds from now.
        let far = u64::try_from(UNRESOLVED_KEPT.as_millis()).unwrap();
        assert!(far < u64::try_from(i64::MAX).unwrap() / 2);
    }

    pub(crate) fn entry(stage: Stage) -> InboxEntry {
        InboxEntry {
            ack: StoredResponse {
                status: 200,
                headers: vec![(
                    Bytes::from_static(b"content-type"),
                    Bytes::from_static(b"text/plain"),
                )],
                body: StoredBody::Kept(Bytes::from_static(b"success")),
            },
            stage,
            attempts: 3,
            limit: 12,
            due_ms: 1_700_000_000_123,
            route: "alipay".into(),
            last_error: "upstream refused the connection".into(),
            last_answer: Some(StoredResponse {
                status: 503,
                headers: Vec::new(),
                body: StoredBody::Kept(Bytes::from_static(b"busy")),
            }),
            request: StoredRequest {
                method: Bytes::from_static(b"POST"),
                target: Bytes::from_static(b"/notify?x=1"),
                headers: vec![(Bytes::from_static(b"x-sig"), Bytes::from_static(b"abc"))],
                body: Bytes::from_static(b"trade_no=1"),
            },
            probes: 0,
        }
    }

    fn record(entry: InboxEntry) -> Record {
        crate::record::sample(RecordState::Inbox(Box::new(entry)))
    }

    #[test]
    fn every_stage_round_trips() {
        for stage in [
            Stage::Queued,
            Stage::Delivering,
            Stage::Delivered,
            Stage::Dead,
            Stage::Unknown,
            Stage::Dropped,
        ] {
            let mut entry = entry(stage);
            if stage == Stage::Queued {
                entry.last_answer = None;
                entry.last_error.clear();
            }
            let record = record(entry);
            let encoded = record.encode().unwrap();
            assert_eq!(encoded[1], 5);
            assert_eq!(Record::decode(&encoded), Ok(record));
        }
    }

    #[test]
    fn probes_are_kept_only_once_there_are_some() {
        let none = record(entry(Stage::Unknown));
        let mut probed = entry(Stage::Unknown);
        probed.probes = 3;
        let probed = record(probed);
        let (a, b) = (none.encode().unwrap(), probed.encode().unwrap());
        assert_eq!(b.len(), a.len() + 4, "four bytes, at the end");
        assert_eq!(&b[..a.len()], &a[..]);
        assert_eq!(Record::decode(&b), Ok(probed));
        assert_eq!(Record::decode(&a), Ok(none));
    }

    #[test]
    fn a_request_survives_the_trip_through_the_record() {
        let request = http::Request::builder()
            .method("PUT")
            .uri("/notify/a%2Fb?sign=x&y=%20")
            .header("x-a", "1")
            .header("x-a", "2")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let stored = StoredRequest::capture(&parts, Bytes::from_static(b"{}"));
        let again = stored.to_parts().unwrap();
        assert_eq!(again.method, "PUT");
        assert_eq!(again.uri, "/notify/a%2Fb?sign=x&y=%20");
        let values: Vec<_> = again.headers.get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
    }

    #[test]
    fn errors_are_cut_on_a_character_boundary() {
        let mut entry = entry(Stage::Queued);
        entry.set_error(&"é".repeat(400));
        assert!(entry.last_error.len() <= MAX_ERROR_LEN);
        assert!(entry.last_error.chars().all(|c| c == 'é'));
    }

    proptest! {
        #[test]
        fn truncations_never_panic_or_decode(cut in 0usize..200) {
            let encoded = record(entry(Stage::Dead)).encode().unwrap();
            let cut = cut.min(encoded.len() - 1);
            prop_assert!(Record::decode(&encoded.slice(..cut)).is_err());
        }

        #[test]
        fn arbitrary_tails_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut bytes = record(entry(Stage::Queued)).encode().unwrap()[..crate::record::HEADER_LEN].to_vec();
            bytes.extend(&tail);
            let _ = Record::decode(&Bytes::from(bytes));
        }
    }
}
