//! Adyen notifications (JSON standard webhooks): the item of
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
//! time, as the caller loops): a body must carry exactly one item, as
//! Adyen's JSON and HTTP POST webhooks always do (only SOAP batches up to
//! six). Items are signed one by one, so a batch could splice items of
//! several captured notifications into a body no key has seen: a new
//! delivery that runs them all again. A body without items is
//! `signature_missing`, one with several `bad_request_body`.
//!
//! The event id ([`super::signed_id`]) is the item's signed
//! `pspReference`, `eventCode` and `success`: the same across Adyen's
//! retries of one notification, and a refund (its own `pspReference`)
//! never collides with its payment.

use serde_json::Value;

use super::{Algorithm, Authenticity, Preset, SignatureEncoding, matching_secret, signed_id};
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

/// Verifies an Adyen notification: its one item, with any key.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let item = match request.json()?.pointer("/notificationItems") {
        Some(Value::Array(items)) if items.len() == 1 => &items[0],
        Some(Value::Array(items)) if items.len() > 1 => {
            return Err(Rejection::BadRequestBody(
                "an adyen notification with one item",
            ));
        }
        _ => return Err(Rejection::SignatureMissing),
    };
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
    let event = [0, 6, 7].map(|i| (SIGNED[i], fields[i].as_bytes()));
    Ok(Authenticity::with_signed_id(key, signed_id(event)))
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
