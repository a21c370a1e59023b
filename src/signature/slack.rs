//! Slack: `X-Slack-Signature: v0=<hex>`, HMAC-SHA-256 of
//! `v0:{X-Slack-Request-Timestamp}:{body}` keyed by the signing secret as
//! text; lowercase hex compared as text; `|now − ts| > 300 s` refused in
//! both directions, as in slack_sdk's `SignatureVerifier`.

use super::{
    Authenticity, Direction, Preset, SignatureEncoding, parse_timestamp, preset_signature,
    preset_window, single_header,
};
use crate::error::Rejection;
use crate::extract::Inbound;

/// Verifies a Slack request at `now_ms`.
pub fn verify(preset: &Preset, request: &Inbound, now_ms: u64) -> Result<Authenticity, Rejection> {
    let headers = &request.parts.headers;
    let header = single_header(headers, "x-slack-signature")?.ok_or(Rejection::SignatureMissing)?;
    let raw_timestamp =
        single_header(headers, "x-slack-request-timestamp")?.ok_or(Rejection::TimestampMissing)?;
    let timestamp = parse_timestamp(raw_timestamp)?;
    let signature = header
        .strip_prefix(b"v0=")
        .ok_or(Rejection::SignatureInvalid)?;
    // slack_sdk signs the header text as received.
    let message: [&[u8]; 4] = [b"v0:", raw_timestamp, b":", &request.body];
    let index = preset_signature(preset, &message, &[signature], SignatureEncoding::LowerHex)?;
    preset_window(preset, timestamp, Direction::Both, now_ms)?;
    Ok(Authenticity::by_secret(index))
}
