//! The versioned record encoding shared by both stores.
//!
//! One record per idempotency key. The layout is fixed-offset up front so
//! the Lua scripts can check the owner token with `string.sub` without
//! decoding anything:
//!
//! ```text
//! offset  size  field
//! 0       1     version (= 3, [`VERSION`])
//! 1       1     state: 1 in-flight, 2 completed, 3 unknown,
//!               4 completed, answer not stored (over max_stored_answer_bytes),
//!               5 in the inbox (the ack, then the inbox section: [`inbox`])
//! 2       16    owner token of the instance that claimed the key
//! 18      32    request fingerprint (SHA-256)
//! 50      8     created at, unix milliseconds, big-endian
//! 58      8     answered at: when the answer a duplicate gets was stored
//!               (states 2, 4, 5; the `Age` of a replay), else created at
//! 66      1     trace flags: bit 0 a trace context follows, bit 1 sampled
//! 67      16    trace id of the first delivery (zero when absent)
//! 83      8     span id of the first delivery (zero when absent)
//! 91      2     key length K: the single-part key value's length, 0 when
//!               the route's key is not single-part or the value is longer
//!               than [`MAX_STORED_KEY`]
//! 93      K     the key value, so the admin listing can show it
//! -- in-flight records (state 1) written since the hold was kept --
//! 93+K    4     `unknown_hold` of the route that claimed, milliseconds,
//!               big-endian: whichever route of the scope reads the claim
//!               judges it by this hold, not by its own ([`ClaimHold`])
//! -- completed records only (states 2 and 4; state 4 has body length 0) --
//! 93+K    2     status code, big-endian
//! 95+K    2     header count N
//!         N ×   (u16 name length, name bytes, u32 value length, value bytes)
//!         4     body length, then the body bytes
//! ```
//!
//! Version 4 is a completed answer equal to the route's acknowledgement,
//! kept as a 60-byte marker: the same version, state and owner bytes, the
//! fingerprint, then the answer time and a digest of the acknowledgement
//! instead of everything after byte 50 ([`compact`]).
//!
//! An inbox record (state 5) carries the acknowledgement its sender got in
//! the completed layout, then the queued request and its redelivery
//! progress ([`inbox_entry::InboxEntry`]); claim.lua replays its ack like a
//! completed answer.
//!
//! Older records are still read, so a rolling upgrade replays what the old
//! build stored: version 2 (this layout without bytes 91..93+K) decodes
//! with no key value; version 1 (without bytes 58..93+K) with "answered
//! at" = "created at", no trace and no key value. An older build reads a
//! newer record as corrupt, which it answers as an unknown outcome —
//! never as a free key.
//!
//! A record that fails to decode (unknown version, truncated) is a
//! [`DecodeError`]; callers treat it as a store error, never as "absent", so
//! a corrupted record can not let a duplicate through.

mod compact;
mod cursor;
pub mod inbox_entry;
mod trace;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

pub use compact::{AckMarker, ack_digest};
use cursor::Cursor;
pub use inbox_entry::{InboxEntry, Stage, StoredRequest};
pub use trace::TraceContext;

/// The encoding version written by this build.
pub const VERSION: u8 = 3;
/// The compact layout of an answer equal to the route's acknowledgement,
/// written beside [`VERSION`] ([`compact`]).
pub use compact::VERSION_4;
/// The previous encodings, still decoded (module docs).
const VERSION_2: u8 = 2;
const VERSION_1: u8 = 1;
/// The longest single-part key value a record keeps (bytes): enough for
/// every provider's event or payment id, small next to any answer.
pub const MAX_STORED_KEY: usize = 256;
/// Byte range of the owner token, as the Lua scripts read it (1-based 3..18).
pub const OWNER_RANGE: std::ops::Range<usize> = 2..18;
const FINGERPRINT_RANGE: std::ops::Range<usize> = 18..50;
/// Length of the fixed header of a version 2 record (and of a version 3
/// one before its key length).
const HEADER_LEN: usize = 66 + trace::ENCODED_LEN;
/// Header length of a version 1 record.
const V1_HEADER_LEN: usize = 58;

/// Identifies the instance and request that holds a claim, so only it can
/// complete, release or renew it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerToken(pub [u8; 16]);

impl std::fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnerToken({})", hex::encode(self.0))
    }
}

/// Mints owner tokens: 8 random bytes per process plus a counter, so tokens
/// are unique across instances without a syscall per request.
#[derive(Debug)]
pub struct OwnerMint {
    instance: [u8; 8],
    counter: AtomicU64,
}

impl OwnerMint {
    /// A mint with a fresh random instance id.
    pub fn new() -> Self {
        let mut instance = [0u8; 8];
        getrandom::fill(&mut instance).expect("the operating system has no random source");
        Self {
            instance,
            counter: AtomicU64::new(0),
        }
    }

    /// The next unique token.
    pub fn next(&self) -> OwnerToken {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut token = [0u8; 16];
        token[..8].copy_from_slice(&self.instance);
        token[8..].copy_from_slice(&n.to_be_bytes());
        OwnerToken(token)
    }
}

impl Default for OwnerMint {
    fn default() -> Self {
        Self::new()
    }
}

/// SHA-256 over the parts of a request that make it "the same request".
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fingerprint({})", hex::encode(self.0))
    }
}

/// A stored upstream answer, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// Status code.
    pub status: u16,
    /// End-to-end headers in order (hop-by-hop ones already removed).
    pub headers: Vec<(Bytes, Bytes)>,
    /// Body bytes, or why they were not kept.
    pub body: StoredBody,
}

/// The body of a stored answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// Kept byte for byte; a replay sends it.
    Kept(Bytes),
    /// The answer was larger than `max_stored_answer_bytes`: it reached the
    /// sender but was not stored. The key stays completed (its duplicates
    /// never execute again); replays carry a problem+json body instead.
    TooLarge,
}

impl StoredBody {
    /// Bytes a replay of this body would send from the store (0 when not kept).
    pub fn stored_len(&self) -> usize {
        match self {
            Self::Kept(bytes) => bytes.len(),
            Self::TooLarge => 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Self::Kept(bytes) => bytes,
            Self::TooLarge => &[],
        }
    }
}

/// The `unknown_hold` an in-flight record was claimed with. Its claim
/// TTL is lease + this hold, and the claim counts as unknown (its owner
/// lost) once no more than this hold remains (contract §4 rule 4). Routes
/// that share a scope may have different holds, so the record carries the
/// claimer's: judged by another route's hold, a live claim could look lost
/// (and be purged) or a lost one live. `None`: a record from a build that
/// did not keep it, judged by the reader's hold as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClaimHold(pub Option<Duration>);

impl ClaimHold {
    /// The hold to judge the claim by: its own, else the reader's.
    pub fn or(self, reader: Duration) -> Duration {
        self.0.unwrap_or(reader)
    }
}

/// Where a key's first delivery stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Claimed; the upstream call runs (or its owner died, see contract §4
    /// rule 4, judged by the claim's own hold).
    InFlight(ClaimHold),
    /// Answered; replay this.
    Completed(StoredResponse),
    /// The upstream may or may not have acted; block re-forwarding.
    Unknown,
    /// The handler could not take the first delivery: the sender was
    /// acknowledged and the request waits in the inbox for redelivery.
    /// Boxed: it carries the whole request.
    Inbox(Box<InboxEntry>),
    /// Answered with the route's acknowledgement, kept as a marker
    /// (layout version 4, [`compact`]); the route's configured
    /// acknowledgement turns it back into the answer ([`AckMarker::replay`]).
    Acknowledged(AckMarker),
}

/// One key's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Holder of the claim.
    pub owner: OwnerToken,
    /// Fingerprint of the first delivery.
    pub fingerprint: Fingerprint,
    /// When the key was first claimed (unix ms).
    pub created_at_ms: u64,
    /// When the answer a duplicate gets was stored (unix ms): the `Age`
    /// of a replay. Equal to `created_at_ms` until there is one.
    pub answered_at_ms: u64,
    /// The first delivery's trace context, which duplicates' spans link to.
    pub trace: Option<TraceContext>,
    /// The single-part key value the first delivery carried, for the
    /// admin listing; `None` for a multi-part or fingerprint key, a value
    /// over [`MAX_STORED_KEY`] bytes, or a record an older build wrote.
    /// Boxed bytes, not `Bytes`: 16 bytes in every record rather than 32.
    pub key: Option<Box<[u8]>>,
    /// State and, when completed, the answer.
    pub state: RecordState,
}

/// A stored value that this build cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Written by a newer (or foreign) encoder.
    #[error("unknown record version {0}")]
    Version(u8),
    /// The state byte is not 1 to 5, or an inbox stage byte is unknown.
    #[error("unknown record state {0}")]
    State(u8),
    /// Ends before its declared lengths.
    #[error("record truncated")]
    Truncated,
    /// Bytes after the body.
    #[error("record has trailing bytes")]
    Trailing,
    /// The trace flags byte has unknown bits, or names all-zero ids.
    #[error("invalid trace context flags {0:#04x}")]
    TraceFlags(u8),
    /// The `Date` byte of a compact record has its flag bits without
    /// its presence bit.
    #[error("invalid acknowledgement date byte {0:#04x}")]
    AckDate(u8),
}

/// A field of an answer too long for its length prefix in the record
/// layout: such an answer can not be stored (and is never truncated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the answer's {field} is {len} long, more than a record can hold")]
pub struct TooLong {
    /// Which length prefix overflowed.
    pub field: &'static str,
    /// The length that did not fit.
    pub len: usize,
}

/// `len` as the prefix type `T`, or which field it overflowed.
fn prefix<T: TryFrom<usize>>(field: &'static str, len: usize) -> Result<T, TooLong> {
    T::try_from(len).map_err(|_| TooLong { field, len })
}

pub use crate::time::now_ms;

impl Record {
    /// A fresh in-flight record for a claim.
    pub fn in_flight(
        owner: OwnerToken,
        fingerprint: Fingerprint,
        trace: Option<TraceContext>,
    ) -> Self {
        let now = now_ms();
        Self {
            owner,
            fingerprint,
            created_at_ms: now,
            answered_at_ms: now,
            trace,
            key: None,
            state: RecordState::InFlight(ClaimHold::default()),
        }
    }

    /// The same record, if in flight, carrying `hold` as its claim's
    /// `unknown_hold` ([`ClaimHold`]).
    pub fn with_hold(self, hold: Duration) -> Self {
        match self.state {
            RecordState::InFlight(_) => Self {
                state: RecordState::InFlight(ClaimHold(Some(hold))),
                ..self
            },
            _ => self,
        }
    }

    /// The same record keeping `key` as its key value, unless the value
    /// is longer than [`MAX_STORED_KEY`] (then none is kept).
    pub fn with_key(self, key: Option<&[u8]>) -> Self {
        let key = key.filter(|key| key.len() <= MAX_STORED_KEY).map(Box::from);
        Self { key, ..self }
    }

    /// The same record in another state (keeps owner, fingerprint, age and
    /// trace). Entering a state that holds a new answer — completed, or
    /// the inbox from outside it (its ack) — stamps `answered_at_ms`.
    pub fn with_state(&self, state: RecordState) -> Self {
        let new_answer = match &state {
            RecordState::Completed(_) | RecordState::Acknowledged(_) => true,
            RecordState::Inbox(_) => !matches!(self.state, RecordState::Inbox(_)),
            RecordState::InFlight(_) | RecordState::Unknown => false,
        };
        Self {
            answered_at_ms: if new_answer {
                now_ms()
            } else {
                self.answered_at_ms
            },
            state,
            ..self.clone()
        }
    }

    /// Whether this is an inbox delivery the inbox still owes (queued,
    /// delivering, dead or unknown: `Some(true)`) or one it has resolved
    /// (`Some(false)`); `None` for a record outside the inbox. The stores
    /// keep each scope's owed set by it, in the same step as the record,
    /// so an owed delivery can always be found from its own record
    /// (`store::inbox`, "Owed sets").
    pub fn owed(&self) -> Option<bool> {
        match &self.state {
            RecordState::Inbox(entry) => Some(!entry.stage.is_resolved()),
            _ => None,
        }
    }

    /// Whole seconds since the answer was stored, for a replay's `Age`
    /// header (RFC 9111 §5.1); zero if the clock went back.
    pub fn answer_age_secs(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.answered_at_ms) / 1000
    }

    /// The state byte its encoding starts with (layout in the module
    /// docs; an acknowledgement marker is a completed record).
    pub fn state_byte(&self) -> u8 {
        match &self.state {
            RecordState::InFlight(_) => 1,
            RecordState::Completed(StoredResponse {
                body: StoredBody::Kept(_),
                ..
            })
            | RecordState::Acknowledged(_) => 2,
            RecordState::Unknown => 3,
            RecordState::Completed(StoredResponse {
                body: StoredBody::TooLarge,
                ..
            }) => 4,
            RecordState::Inbox(_) => 5,
        }
    }

    /// Serialises the record (layout in the module docs). Fails only for
    /// an answer with more than 65,535 headers, a header name over 64 KiB,
    /// or a value or body over 4 GiB.
    pub fn encode(&self) -> Result<Bytes, TooLong> {
        if let RecordState::Acknowledged(marker) = &self.state {
            return compact::put(self, marker);
        }
        let extra = match &self.state {
            RecordState::Completed(r) => response_len(r),
            RecordState::Inbox(entry) => response_len(&entry.ack) + entry.encoded_len(),
            _ => 0,
        };
        let key = self
            .key
            .as_deref()
            .filter(|key| key.len() <= MAX_STORED_KEY)
            .unwrap_or_default();
        let mut out = BytesMut::with_capacity(HEADER_LEN + 2 + key.len() + extra);
        out.put_u8(VERSION);
        out.put_u8(self.state_byte());
        out.put_slice(&self.owner.0);
        out.put_slice(&self.fingerprint.0);
        out.put_u64(self.created_at_ms);
        out.put_u64(self.answered_at_ms);
        TraceContext::put(self.trace.as_ref(), &mut out);
        out.put_u16(prefix("key", key.len())?);
        out.put_slice(key);
        match &self.state {
            RecordState::Completed(response) => put_response(&mut out, response)?,
            RecordState::Inbox(entry) => {
                put_response(&mut out, &entry.ack)?;
                entry.put(&mut out)?;
            }
            RecordState::InFlight(ClaimHold(Some(hold))) => {
                out.put_u32(u32::try_from(hold.as_millis()).unwrap_or(u32::MAX));
            }
            RecordState::InFlight(ClaimHold(None))
            | RecordState::Unknown
            | RecordState::Acknowledged(_) => {}
        }
        Ok(out.freeze())
    }

    /// Parses a stored value; slices of `bytes` become the body and headers
    /// without copying.
    pub fn decode(bytes: &Bytes) -> Result<Self, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Truncated);
        }
        let fixed_len = match bytes[0] {
            VERSION | VERSION_2 => HEADER_LEN,
            VERSION_1 => V1_HEADER_LEN,
            VERSION_4 => return compact::read(bytes),
            other => return Err(DecodeError::Version(other)),
        };
        if bytes.len() < fixed_len {
            return Err(DecodeError::Truncated);
        }
        let mut owner = [0u8; 16];
        owner.copy_from_slice(&bytes[OWNER_RANGE]);
        let mut fingerprint = [0u8; 32];
        fingerprint.copy_from_slice(&bytes[FINGERPRINT_RANGE]);
        let created_at_ms = u64::from_be_bytes(bytes[50..58].try_into().expect("8 bytes"));
        let (answered_at_ms, trace) = if fixed_len == HEADER_LEN {
            let answered_at_ms = u64::from_be_bytes(bytes[58..66].try_into().expect("8 bytes"));
            (answered_at_ms, TraceContext::read(&bytes[66..HEADER_LEN])?)
        } else {
            (created_at_ms, None)
        };
        let mut header = Cursor {
            bytes,
            at: fixed_len,
        };
        let key = if bytes[0] == VERSION {
            let len = usize::from(header.u16()?);
            // Copied: a slice would pin the whole reply it came in.
            let key = header.take(len)?;
            (!key.is_empty()).then(|| Box::from(&key[..]))
        } else {
            None
        };
        let header_len = header.at;
        let state = match bytes[1] {
            1 if bytes[0] == VERSION && bytes.len() == header_len + 4 => {
                let ms = u32::from_be_bytes(bytes[header_len..].try_into().expect("4 bytes"));
                RecordState::InFlight(ClaimHold(Some(Duration::from_millis(u64::from(ms)))))
            }
            1 | 3 if bytes.len() > header_len => return Err(DecodeError::Trailing),
            1 => RecordState::InFlight(ClaimHold::default()),
            3 => RecordState::Unknown,
            2 => RecordState::Completed(whole_response(bytes, header_len, true)?),
            4 => RecordState::Completed(whole_response(bytes, header_len, false)?),
            5 => {
                let mut cursor = Cursor {
                    bytes,
                    at: header_len,
                };
                let ack = read_response(&mut cursor, true)?;
                let entry = InboxEntry::read(&mut cursor, ack)?;
                cursor.finish()?;
                RecordState::Inbox(Box::new(entry))
            }
            other => return Err(DecodeError::State(other)),
        };
        Ok(Self {
            owner: OwnerToken(owner),
            fingerprint: Fingerprint(fingerprint),
            created_at_ms,
            answered_at_ms,
            trace,
            key,
            state,
        })
    }
}

/// Bytes [`put_response`] writes for `response`.
fn response_len(response: &StoredResponse) -> usize {
    8 + response.body.stored_len()
        + response
            .headers
            .iter()
            .map(|(n, v)| 6 + n.len() + v.len())
            .sum::<usize>()
}

/// Writes an answer: status, header count, the headers, the body.
fn put_response(out: &mut BytesMut, response: &StoredResponse) -> Result<(), TooLong> {
    out.put_u16(response.status);
    put_headers(out, &response.headers)?;
    put_block(out, "body", response.body.bytes())
}

/// Writes a header list: a u16 count, then per header a u16 name length,
/// the name, a u32 value length and the value.
fn put_headers(out: &mut BytesMut, headers: &[(Bytes, Bytes)]) -> Result<(), TooLong> {
    out.put_u16(prefix("header count", headers.len())?);
    for (name, value) in headers {
        out.put_u16(prefix("header name", name.len())?);
        out.put_slice(name);
        put_block(out, "header value", value)?;
    }
    Ok(())
}

/// Writes a u32 length, then the bytes.
fn put_block(out: &mut BytesMut, field: &'static str, bytes: &[u8]) -> Result<(), TooLong> {
    out.put_u32(prefix(field, bytes.len())?);
    out.put_slice(bytes);
    Ok(())
}

/// An answer (layout of [`put_response`]); `body_kept` is false for state
/// 4, whose body must be empty.
fn read_response(cursor: &mut Cursor<'_>, body_kept: bool) -> Result<StoredResponse, DecodeError> {
    let status = cursor.u16()?;
    let headers = cursor.headers()?;
    let body = cursor.block()?;
    if !body_kept && !body.is_empty() {
        return Err(DecodeError::Trailing);
    }
    let body = if body_kept {
        StoredBody::Kept(body)
    } else {
        StoredBody::TooLarge
    };
    Ok(StoredResponse {
        status,
        headers,
        body,
    })
}

/// The answer that is all of a completed record's tail, which starts at
/// `header_len`.
fn whole_response(
    bytes: &Bytes,
    header_len: usize,
    body_kept: bool,
) -> Result<StoredResponse, DecodeError> {
    let mut cursor = Cursor {
        bytes,
        at: header_len,
    };
    let response = read_response(&mut cursor, body_kept)?;
    cursor.finish()?;
    Ok(response)
}

#[cfg(test)]
mod tests;

/// A record in `state` with fixed owner, fingerprint and times, for the
/// unit tests of the modules that handle records.
#[cfg(test)]
pub(crate) fn sample(state: RecordState) -> Record {
    Record {
        owner: OwnerToken([7; 16]),
        fingerprint: Fingerprint([9; 32]),
        created_at_ms: 1_700_000_000_000,
        answered_at_ms: 1_700_000_000_000,
        trace: None,
        key: None,
        state,
    }
}
