//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA-256 of the raw body
//! keyed by the app's client secret as text, compared as padded base64
//! text. As @shopify/shopify-api's `webhooks.validate` does, the delivery
//! must also carry the topic, shop domain, API version and webhook id
//! headers. The newer event deliveries use the same names without `X-`;
//! both spellings are read. No timestamp is signed, so there is no window
//! (warned about at start-up).
//!
//! Only the body is signed: `X-Shopify-Webhook-Id` is not, so a key on it
//! lets a captured body run again under a new id. The event id
//! ([`super::signed_id`]) is the signed body itself, the preset's default
//! key: a retry (same body, same webhook id) is a replay, and two
//! webhooks with byte-identical bodies are one delivery.

use super::{Authenticity, Preset, SignatureEncoding, preset_signature, single_header};
use crate::error::Rejection;
use crate::extract::Inbound;

/// Headers `webhooks.validate` requires besides the HMAC.
const REQUIRED: [&str; 4] = ["topic", "shop-domain", "api-version", "webhook-id"];

fn header<'a>(request: &'a Inbound, suffix: &str) -> Result<Option<&'a [u8]>, Rejection> {
    let headers = &request.parts.headers;
    match single_header(headers, &format!("x-shopify-{suffix}"))? {
        Some(value) => Ok(Some(value)),
        None => single_header(headers, &format!("shopify-{suffix}")),
    }
}

/// Verifies a Shopify delivery.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let signature = header(request, "hmac-sha256")?.ok_or(Rejection::SignatureMissing)?;
    for suffix in REQUIRED {
        header(request, suffix)?.ok_or(Rejection::SignatureMissing)?;
    }
    let message: [&[u8]; 1] = [&request.body];
    let index = preset_signature(preset, &message, &[signature], SignatureEncoding::Base64)?;
    Ok(Authenticity::with_signed_body(index))
}
