//! The first delivery's trace context, kept in its record so that every
//! later copy of the delivery — replays, 409s, 422s, on any instance — can
//! link its span to the attempt that ran the handler (so one trace query
//! shows a callback's whole retry story).
//!
//! Stored as 25 fixed bytes (flags, trace id, span id) in the record
//! header; see the layout in [`crate::record`].

use bytes::{BufMut, BytesMut};

use super::DecodeError;

/// Flag bit: a trace context is present.
const PRESENT: u8 = 0b01;
/// Flag bit: the first delivery's trace was sampled.
const SAMPLED: u8 = 0b10;
/// Bytes the context takes in the record header.
pub(super) const ENCODED_LEN: usize = 1 + 16 + 8;

/// A W3C trace context (trace id, parent span id, sampled flag) as bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The 16-byte trace id; never all zero.
    pub trace_id: [u8; 16],
    /// The 8-byte id of the first delivery's span; never all zero.
    pub span_id: [u8; 8],
    /// Whether that trace was sampled (exported).
    pub sampled: bool,
}

impl std::fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tail = if self.sampled { " sampled)" } else { ")" };
        self.write_ids(f, "TraceContext(", tail)
    }
}

/// The W3C `traceparent` form: `00-<trace id>-<span id>-<flags>`.
impl std::fmt::Display for TraceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flags = if self.sampled { "-01" } else { "-00" };
        self.write_ids(f, "00-", flags)
    }
}

impl TraceContext {
    /// Writes `<trace id>-<span id>` in hex between `head` and `tail`: the
    /// ids read the same in the debug form and the `traceparent` form.
    fn write_ids(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        head: &str,
        tail: &str,
    ) -> std::fmt::Result {
        let (trace, span) = (hex::encode(self.trace_id), hex::encode(self.span_id));
        write!(f, "{head}{trace}-{span}{tail}")
    }

    /// A context from its ids, or `None` for the all-zero ids W3C trace
    /// context calls invalid.
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self {
            trace_id,
            span_id,
            sampled,
        })
    }

    /// Writes `context` (or its absence) as [`ENCODED_LEN`] bytes.
    pub(super) fn put(context: Option<&Self>, out: &mut BytesMut) {
        match context {
            Some(context) => {
                out.put_u8(PRESENT | if context.sampled { SAMPLED } else { 0 });
                out.put_slice(&context.trace_id);
                out.put_slice(&context.span_id);
            }
            None => out.put_bytes(0, ENCODED_LEN),
        }
    }

    /// Reads the [`ENCODED_LEN`] bytes [`TraceContext::put`] wrote.
    pub(super) fn read(bytes: &[u8]) -> Result<Option<Self>, DecodeError> {
        let (&flags, ids) = bytes.split_first().ok_or(DecodeError::Truncated)?;
        if flags & !(PRESENT | SAMPLED) != 0 {
            return Err(DecodeError::TraceFlags(flags));
        }
        if flags & PRESENT == 0 {
            return Ok(None);
        }
        let ids: &[u8; 24] = ids
            .get(..24)
            .and_then(|ids| ids.try_into().ok())
            .ok_or(DecodeError::Truncated)?;
        let (trace_id, span_id) = ids.split_at(16);
        let trace_id: [u8; 16] = trace_id.try_into().expect("16 bytes");
        let span_id: [u8; 8] = span_id.try_into().expect("8 bytes");
        Self::new(trace_id, span_id, flags & SAMPLED != 0)
            .map(Some)
            .ok_or(DecodeError::TraceFlags(flags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_present_and_absent() {
        let context = TraceContext::new([1; 16], [2; 8], true).unwrap();
        for value in [
            Some(context),
            None,
            Some(TraceContext {
                sampled: false,
                ..context
            }),
        ] {
            let mut out = BytesMut::new();
            TraceContext::put(value.as_ref(), &mut out);
            assert_eq!(out.len(), ENCODED_LEN);
            assert_eq!(TraceContext::read(&out), Ok(value));
        }
    }

    #[test]
    fn displays_as_a_traceparent() {
        let context = TraceContext::new([0xab; 16], [0x01; 8], true).unwrap();
        assert_eq!(
            context.to_string(),
            format!("00-{}-0101010101010101-01", "ab".repeat(16))
        );
    }

    #[test]
    fn zero_ids_are_no_context() {
        assert_eq!(TraceContext::new([0; 16], [2; 8], true), None);
        assert_eq!(TraceContext::new([1; 16], [0; 8], true), None);
        let mut zero_ids = vec![PRESENT];
        zero_ids.extend([0; 24]);
        assert_eq!(
            TraceContext::read(&zero_ids),
            Err(DecodeError::TraceFlags(PRESENT))
        );
    }

    #[test]
    fn unknown_flags_and_short_input_are_refused() {
        let mut bytes = vec![0b100];
        bytes.extend([1; 24]);
        assert_eq!(
            TraceContext::read(&bytes),
            Err(DecodeError::TraceFlags(0b100))
        );
        assert_eq!(TraceContext::read(&[]), Err(DecodeError::Truncated));
        assert_eq!(
            TraceContext::read(&[PRESENT, 1, 2]),
            Err(DecodeError::Truncated)
        );
    }
}
