//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA-256 of the raw
//! body keyed by the secret as text. The whole `sha256=<lowercase hex>`
//! string must match, as in @octokit/webhooks-methods. GitHub signs no
//! timestamp, so there is no window: deduplication for `retention` is the
//! replay protection (warned about at start-up).
//!
//! GitHub signs the body only: `X-GitHub-Delivery` is not covered, so a
//! key on it lets a captured body run again under a new header. The event
//! id ([`super::signed_id`]) is the signed body itself, the preset's
//! default key: a redelivery (same body, same delivery id) is a replay,
//! and two events with byte-identical bodies are one delivery.

use super::{Authenticity, Preset, SignatureEncoding, preset_signature, single_header};
use crate::error::Rejection;
use crate::extract::Inbound;

/// Verifies a GitHub delivery.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let header = single_header(&request.parts.headers, "x-hub-signature-256")?
        .ok_or(Rejection::SignatureMissing)?;
    let signature = header
        .strip_prefix(b"sha256=")
        .ok_or(Rejection::SignatureInvalid)?;
    let message: [&[u8]; 1] = [&request.body];
    let index = preset_signature(preset, &message, &[signature], SignatureEncoding::LowerHex)?;
    Ok(Authenticity::with_signed_body(index))
}
