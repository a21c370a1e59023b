//! Stripe: `Stripe-Signature: t=<ts>,v1=<hex>[,v1=<hex>…][,v0=<hex>]`.
//!
//! HMAC-SHA-256 of `{t}.{body}` keyed by the signing secret *as text*
//! (the whole `whsec_…` string, not decoded); only `v1` entries count, any
//! may match (Stripe sends one per active secret while rolling); lowercase
//! hex compared as text. The window is past-only, as in stripe-python and
//! stripe-node: a timestamp older than the tolerance (default 300 s) is
//! refused, a future one is accepted.

use super::{
    Authenticity, Direction, Preset, SignatureEncoding, parse_timestamp, preset_signature,
    preset_window, single_header,
};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The `t` value and the `v1` signatures of a `Stripe-Signature` header.
/// The first `t` wins; entries without `=` and other schemes are skipped.
pub fn parse_header(header: &[u8]) -> (Option<&[u8]>, Vec<&[u8]>) {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(|b| *b == b',') {
        let Some(at) = item.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (key, value) = (item[..at].trim_ascii(), item[at + 1..].trim_ascii());
        match key {
            b"t" if timestamp.is_none() => timestamp = Some(value),
            b"v1" if !value.is_empty() => signatures.push(value),
            _ => {}
        }
    }
    (timestamp, signatures)
}

/// Verifies a Stripe delivery at `now_ms`.
pub fn verify(preset: &Preset, request: &Inbound, now_ms: u64) -> Result<Authenticity, Rejection> {
    let header = single_header(&request.parts.headers, "stripe-signature")?
        .ok_or(Rejection::SignatureMissing)?;
    let (raw_timestamp, candidates) = parse_header(header);
    let timestamp = parse_timestamp(raw_timestamp.ok_or(Rejection::TimestampMissing)?)?;
    if candidates.is_empty() {
        return Err(Rejection::SignatureInvalid);
    }
    let timestamp_text = timestamp.to_string();
    let message: [&[u8]; 3] = [timestamp_text.as_bytes(), b".", &request.body];
    let index = preset_signature(preset, &message, &candidates, SignatureEncoding::LowerHex)?;
    preset_window(preset, timestamp, Direction::PastOnly, now_ms)?;
    Ok(Authenticity::by_secret(index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_parsing() {
        let (t, v1) = parse_header(b"t=12,v1=aa,v0=bb,v1=cc,x,v2=dd,t=99");
        assert_eq!(t, Some(&b"12"[..]));
        assert_eq!(v1, vec![&b"aa"[..], b"cc"]);
        assert_eq!(parse_header(b""), (None, vec![]));
    }

    proptest! {
        #[test]
        fn header_parser_never_panics(header in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_header(&header);
        }
    }
}
