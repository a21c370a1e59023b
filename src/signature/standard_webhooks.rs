//! Standard Webhooks (and Svix, which sends the same scheme under `svix-*`
//! header names).
//!
//! `webhook-signature: v1,<base64> [v1,<base64> …]` over
//! `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA-256 keyed by the
//! base64-decoded `whsec_` secret; several space-separated signatures
//! (sender-side rotation), any may match; other versions (`v1a,` ed25519)
//! are skipped; ±5 minutes by default. The `webhook-*` set is used when its
//! signature header is present, else the `svix-*` set. The signed message
//! id is handed on as the default idempotency key.

use bytes::Bytes;

use super::{
    Authenticity, Direction, Preset, SignatureEncoding, parse_timestamp, preset_signature,
    preset_window, single_header,
};
use crate::error::Rejection;
use crate::extract::Inbound;

/// `(id, timestamp, signature)` header names of the two families.
const WEBHOOK: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];
const SVIX: [&str; 3] = ["svix-id", "svix-timestamp", "svix-signature"];

/// The `v1` signatures of a `webhook-signature` value.
pub fn v1_signatures(header: &[u8]) -> Vec<&[u8]> {
    header
        .split(|b| *b == b' ')
        .filter_map(|entry| entry.strip_prefix(b"v1,"))
        .filter(|signature| !signature.is_empty())
        .collect()
}

/// Verifies a Standard Webhooks / Svix delivery at `now_ms`.
pub fn verify(preset: &Preset, request: &Inbound, now_ms: u64) -> Result<Authenticity, Rejection> {
    let headers = &request.parts.headers;
    let names = if headers.contains_key(WEBHOOK[2]) {
        WEBHOOK
    } else {
        SVIX
    };
    let signature = single_header(headers, names[2])?.ok_or(Rejection::SignatureMissing)?;
    let id = single_header(headers, names[0])?.ok_or(Rejection::SignatureMissing)?;
    let raw_timestamp = single_header(headers, names[1])?.ok_or(Rejection::TimestampMissing)?;
    let timestamp = parse_timestamp(raw_timestamp)?;
    let candidates = v1_signatures(signature);
    if candidates.is_empty() {
        return Err(Rejection::SignatureInvalid);
    }
    // The libraries sign the parsed integer, not the header text.
    let timestamp_text = timestamp.to_string();
    let message: [&[u8]; 5] = [id, b".", timestamp_text.as_bytes(), b".", &request.body];
    let index = preset_signature(preset, &message, &candidates, SignatureEncoding::Base64)?;
    preset_window(preset, timestamp, Direction::Both, now_ms)?;
    Ok(Authenticity::with_signed_id(
        index,
        Some(Bytes::copy_from_slice(id)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_lists() {
        assert_eq!(
            v1_signatures(b"v1,AAA= v1,BBB="),
            vec![&b"AAA="[..], b"BBB="]
        );
        assert_eq!(v1_signatures(b"v1a,AAA= v2,x v1,"), Vec::<&[u8]>::new());
        assert_eq!(v1_signatures(b"  v1,C  "), vec![&b"C"[..]]);
    }
}
