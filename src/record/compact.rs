//! Layout version 4: a completed answer that equals the route's
//! acknowledgement, kept as a 60-byte marker instead of the answer.
//!
//! Payment and webhook channels answer almost every delivery with the same
//! fixed acknowledgement (`success`, `[accepted]`, an empty 200) and keep
//! records for weeks, so the answer bytes (status, headers, body) dominate
//! a completed key's memory. When the answer is the route's known
//! acknowledgement (its `[route.inbox]` ack) byte for byte — apart from a
//! `Date` header, which is rebuilt from the answer time — the record keeps
//! only what the promise needs:
//!
//! ```text
//! offset  size  field
//! 0       1     version (= 4)
//! 1       1     state (= 2, completed: claim.lua reads it)
//! 2       16    owner token (complete.lua fences on it; a retried complete
//!               whose first reply was lost recognises its own write)
//! 18      32    request fingerprint (a different body still gets 422)
//! 50      4     answered at, unix seconds, big-endian (`Age`, `Date`)
//! 54      1     status − 200
//! 55      1     the `Date` header: 0 none; else bit 7 set, bit 6 "before
//!               the acknowledgement's headers", bits 0–5 the offset of the
//!               date from the answer time in seconds (−32..=31, two's
//!               complement)
//! 56      4     digest of the acknowledgement: the first 4 bytes of the
//!               SHA-256 of its status, headers and body as a record stores
//!               them
//! ```
//!
//! The creation time, the key value and the trace context are not kept:
//! the record reads back with "created at" = "answered at" (whole
//! seconds), no key value and no trace link.
//!
//! A marker whose digest is not the route's acknowledgement any more (the
//! configuration changed since it was written) never stands for another
//! answer: it replays like an answer that was not stored (state 4: its
//! status with an `answer_not_stored` problem document), and the key stays
//! blocked until its retention ends.

use std::time::{Duration, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::{
    DecodeError, FINGERPRINT_RANGE, Fingerprint, OWNER_RANGE, OwnerToken, Record, RecordState,
    StoredBody, StoredResponse, TooLong, prefix, put_response,
};

/// The version byte of a compact record.
pub const VERSION_4: u8 = 4;
/// Every compact record is this long.
pub(super) const ENCODED_LEN: usize = 60;
/// Lowest status a marker can name (the byte stores `status - 200`).
const LOWEST_STATUS: u16 = 200;
/// Date byte: a `Date` header is rebuilt.
const DATE_PRESENT: u8 = 0b1000_0000;
/// Date byte: the `Date` header comes before the acknowledgement's headers.
const DATE_FIRST: u8 = 0b0100_0000;
/// Date byte: the offset bits.
const OFFSET_BITS: u8 = 0b0011_1111;
/// The farthest a `Date` header may lie from the answer time (seconds).
const MAX_OFFSET: i64 = 31;

/// A completed answer that was the route's acknowledgement, by reference.
/// Built only by [`AckMarker::of`] (or decoded), so its status fits the
/// layout's byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckMarker {
    /// The status minus 200: the layout's byte, so any marker encodes.
    status_offset: u8,
    digest: [u8; 4],
    date: Option<DateStamp>,
}

/// Where the answer's `Date` header was and how far it lay from the
/// answer time, so a replay rebuilds it byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DateStamp {
    /// The date's whole seconds minus the answer time's.
    offset_secs: i8,
    /// Before the acknowledgement's own headers (else after them).
    first: bool,
}

/// The first 4 bytes of the SHA-256 of `ack` as a record stores it: the
/// name a marker gives its acknowledgement.
pub fn ack_digest(ack: &StoredResponse) -> [u8; 4] {
    let mut encoded = BytesMut::new();
    // Only an answer with over 65,535 headers fails to encode; no
    // acknowledgement has one, and a digest of the prefix still differs.
    let _ = put_response(&mut encoded, ack);
    let hash = Sha256::digest(&encoded);
    [hash[0], hash[1], hash[2], hash[3]]
}

impl AckMarker {
    /// The marker for `answer`, stored at `answered_at_ms`, if it equals
    /// `ack`: the same status and body, and exactly the acknowledgement's
    /// headers plus at most one `Date` in IMF-fixdate form within 31 s of
    /// the answer time, before or after them. `None` for any other answer
    /// (another header, another body, a body not stored): it is kept whole.
    pub fn of(ack: &StoredResponse, answer: &StoredResponse, answered_at_ms: u64) -> Option<Self> {
        let (StoredBody::Kept(ack_body), StoredBody::Kept(body)) = (&ack.body, &answer.body) else {
            return None;
        };
        if ack.status != answer.status || ack_body != body {
            return None;
        }
        // The layout keeps the answer time as u32 seconds (until 2106).
        u32::try_from(answered_at_ms / 1000).ok()?;
        let status_offset = u8::try_from(ack.status.checked_sub(LOWEST_STATUS)?).ok()?;
        let is_date = |name: &Bytes| name.eq_ignore_ascii_case(b"date");
        let dates: Vec<usize> = (answer.headers.iter().enumerate())
            .filter(|(_, (name, _))| is_date(name))
            .map(|(at, _)| at)
            .collect();
        let date = match dates[..] {
            [] => None,
            [at] => Some(stamp(&answer.headers[at], at == 0, answered_at_ms)?),
            _ => return None,
        };
        let rest: Vec<&(Bytes, Bytes)> =
            answer.headers.iter().filter(|(n, _)| !is_date(n)).collect();
        if rest.len() != ack.headers.len() || rest.iter().zip(&ack.headers).any(|(a, b)| *a != b) {
            return None;
        }
        // A date between the acknowledgement's headers can not be rebuilt.
        if date.is_some_and(|d| !d.first) && dates[0] != answer.headers.len() - 1 {
            return None;
        }
        Some(Self {
            status_offset,
            digest: ack_digest(ack),
            date,
        })
    }

    /// The status of the acknowledgement it names.
    pub fn status(&self) -> u16 {
        LOWEST_STATUS + u16::from(self.status_offset)
    }

    /// The digest of the acknowledgement it names, in hex (the record view).
    pub fn digest_hex(&self) -> String {
        hex::encode(self.digest)
    }

    /// The answer a duplicate gets: `ack` with the `Date` rebuilt from
    /// `answered_at_ms`, when `ack` is the acknowledgement the marker
    /// names; otherwise (none, or the configuration changed) the answer
    /// is treated as not stored: its status, no headers, no body.
    pub fn replay(&self, ack: Option<&StoredResponse>, answered_at_ms: u64) -> StoredResponse {
        let Some(ack) =
            ack.filter(|ack| ack.status == self.status() && ack_digest(ack) == self.digest)
        else {
            return StoredResponse {
                status: self.status(),
                headers: Vec::new(),
                body: StoredBody::TooLarge,
            };
        };
        let mut headers = ack.headers.clone();
        if let Some(date) = self.date {
            let secs = (answered_at_ms / 1000).saturating_add_signed(i64::from(date.offset_secs));
            let value = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            let header = (Bytes::from_static(b"date"), Bytes::from(value));
            if date.first {
                headers.insert(0, header);
            } else {
                headers.push(header);
            }
        }
        StoredResponse {
            status: ack.status,
            headers,
            body: ack.body.clone(),
        }
    }

    fn date_byte(&self) -> u8 {
        self.date.map_or(0, |date| {
            let first = if date.first { DATE_FIRST } else { 0 };
            DATE_PRESENT | first | (date.offset_secs as u8 & OFFSET_BITS)
        })
    }
}

/// The `Date` header `(name, value)` as a stamp, if a replay can rebuild
/// it byte for byte: lower-case name, IMF-fixdate value, close to the
/// answer time.
fn stamp(header: &(Bytes, Bytes), first: bool, answered_at_ms: u64) -> Option<DateStamp> {
    let (name, value) = header;
    if &name[..] != b"date" {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    if httpdate::fmt_http_date(time) != text {
        return None;
    }
    let secs = i64::try_from(time.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()?;
    let answered = i64::try_from(answered_at_ms / 1000).ok()?;
    let offset = secs - answered;
    let offset_secs = i8::try_from(offset).ok()?;
    (-(MAX_OFFSET + 1)..=MAX_OFFSET)
        .contains(&offset)
        .then_some(DateStamp { offset_secs, first })
}

/// Writes `record`, whose state is `marker`, in layout version 4.
pub(super) fn put(record: &Record, marker: &AckMarker) -> Result<Bytes, TooLong> {
    let mut out = BytesMut::with_capacity(ENCODED_LEN);
    out.put_u8(VERSION_4);
    out.put_u8(2);
    out.put_slice(&record.owner.0);
    out.put_slice(&record.fingerprint.0);
    out.put_u32(prefix(
        "answer time",
        (record.answered_at_ms / 1000) as usize,
    )?);
    out.put_u8(marker.status_offset);
    out.put_u8(marker.date_byte());
    out.put_slice(&marker.digest);
    Ok(out.freeze())
}

/// Reads a version 4 record.
pub(super) fn read(bytes: &[u8]) -> Result<Record, DecodeError> {
    if bytes.len() < ENCODED_LEN {
        return Err(DecodeError::Truncated);
    }
    if bytes.len() > ENCODED_LEN {
        return Err(DecodeError::Trailing);
    }
    if bytes[1] != 2 {
        return Err(DecodeError::State(bytes[1]));
    }
    let date_byte = bytes[55];
    let date = match date_byte {
        0 => None,
        byte if byte & DATE_PRESENT != 0 => {
            // Sign-extend the 6-bit offset.
            let offset_secs = (((byte & OFFSET_BITS) << 2) as i8) >> 2;
            Some(DateStamp {
                offset_secs,
                first: byte & DATE_FIRST != 0,
            })
        }
        other => return Err(DecodeError::AckDate(other)),
    };
    let mut owner = [0u8; 16];
    owner.copy_from_slice(&bytes[OWNER_RANGE]);
    let mut fingerprint = [0u8; 32];
    fingerprint.copy_from_slice(&bytes[FINGERPRINT_RANGE]);
    let secs = u32::from_be_bytes(bytes[50..54].try_into().expect("4 bytes"));
    let answered_at_ms = u64::from(secs) * 1000;
    let marker = AckMarker {
        status_offset: bytes[54],
        digest: bytes[56..60].try_into().expect("4 bytes"),
        date,
    };
    Ok(Record {
        owner: OwnerToken(owner),
        fingerprint: Fingerprint(fingerprint),
        created_at_ms: answered_at_ms,
        answered_at_ms,
        trace: None,
        key: None,
        state: RecordState::Acknowledged(marker),
    })
}

impl Record {
    /// The same record, holding a marker instead of its answer when the
    /// answer equals `ack` (module docs); any other record as it is.
    pub fn compacted(self, ack: Option<&StoredResponse>) -> Self {
        let marker = match (&self.state, ack) {
            (RecordState::Completed(answer), Some(ack)) => {
                AckMarker::of(ack, answer, self.answered_at_ms)
            }
            _ => None,
        };
        match marker {
            Some(marker) => Self {
                state: RecordState::Acknowledged(marker),
                ..self
            },
            None => self,
        }
    }
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
