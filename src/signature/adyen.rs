//! Adyen notifications (JSON standard webhooks): every item of
//! `notificationItems` carries `additionalData.hmacSignature`, the base64
//! HMAC-SHA256, keyed by the hex-decoded HMAC key, of eight of its fields
//! joined by `:` — `pspReference`, `originalReference`,
//! `merchantAccountCode`, `merchantReference`, `amount.value`,
//! `amount.currency`, `eventCode`, `success` — with an absent field as
//! the empty string (@adyen/api-library `HmacValidator`).
//!
//! **Only those eight fields are signed.** Everything else in an item
//! (`additionalData`, `reason`, `eventDate`, `paymentMethod`, …) and in the
//! envelope (`live`) is not authenticated; a handler must not act on it
//! without checking it against Adyen's API.
//!
//! Deliberately stricter than the library (which checks one item at a
//! time, as the caller loops): every item must verify, and a body without
//! items is `signature_missing`.
//!
//! The event id ([`super::signed_id`]) is each item's signed
//! `pspReference`, `eventCode` and `success`, the combination Adyen
//! documents for recognising a duplicate: the same across retries, and a
//! refund (its own `pspReference`) never collides with its payment.

use serde_json::Value;

use super::{Authenticity, SignatureEncoding, matching_secret, signed_id};
use crate::config::{Algorithm, Preset};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The signed fields of an item, as JSON pointers, in signing order.
const SIGNED: [&str; 8] = [
    "/pspReference",
    "/originalReference",
    "/merchantAccountCode",
    "/merchantReference",
    "/amount/value",
    "/amount/currency",
    "/eventCode",
    "/success",
];

/// Verifies an Adyen notification: every item, each with any key.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let items = match request.json()?.pointer("/notificationItems") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(Rejection::SignatureMissing),
    };
    let mut first_key = None;
    let mut event = Vec::with_capacity(items.len() * 3);
    for item in items {
        let item = item
            .get("NotificationRequestItem")
            .ok_or(Rejection::SignatureMissing)?;
        let presented = match item.pointer("/additionalData/hmacSignature") {
            Some(Value::String(text)) if !text.is_empty() => text,
            _ => return Err(Rejection::SignatureMissing),
        };
        let fields: Vec<String> = SIGNED.iter().map(|p| field(item, p)).collect();
        let content = fields.join(":");
        let key = matching_secret(
            Algorithm::Sha256,
            &preset.keys,
            &[content.as_bytes()],
            &[presented.as_bytes()],
            SignatureEncoding::Base64,
        )
        .ok_or(Rejection::SignatureInvalid)?;
        first_key.get_or_insert(key);
        event.extend([0, 6, 7].map(|i| (SIGNED[i], fields[i].clone())));
    }
    let id = signed_id(event.iter().map(|(name, value)| (*name, value.as_bytes())));
    Ok(Authenticity::with_signed_id(
        first_key.expect("at least one item verified"),
        id,
    ))
}

/// A signed field as the library writes it: strings as they are, numbers
/// and booleans as their JSON text, anything absent or null as "".
fn field(item: &Value, pointer: &str) -> String {
    match item.pointer(pointer) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}
