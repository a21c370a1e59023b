//! Alipay asynchronous notifications: a form-urlencoded POST whose `sign`
//! is SHA256withRSA (`sign_type=RSA2`) over every other parameter except
//! `sign` and `sign_type`, URL-decoded, sorted by name and joined as `k=v`
//! with `&`, empty values included (alipay-sdk `checkNotifySignV2`, whose
//! filter tests the name, not the value). Alipay signs no timestamp: deduplication for
//! `retention` is the replay protection (warned about at start-up).
//!
//! Deliberately stricter than the SDKs:
//! * `sign_type=RSA` (SHA1withRSA) is refused unless the route sets
//!   `allow_rsa1 = true`; any other `sign_type` is refused.
//! * A parameter named twice is refused (the SDKs keep one of the two, and
//!   the backend may act on the other).
//! * Only UTF-8 notifications are read: a `charset` other than `utf-8` is
//!   refused as `bad_request_body` (the values would be decoded wrongly).
//! * The SDK, when a signature fails, tries again with `sign_type` inside
//!   the signed content; Alipay's documentation signs without it, and so
//!   is the only content idemgate accepts.
//!
//! The event id ([`super::signed_id`]) is built from the signed
//! `notify_type`, `trade_no`, `out_trade_no`, `trade_status` and
//! `out_biz_no`: the same across Alipay's retries of one notification
//! (which change `notify_id`, `notify_time` and `sign`), different for the
//! payment and each partial refund (which keeps `trade_status=TRADE_SUCCESS`
//! but adds its own `out_biz_no`).

use super::{Authenticity, Preset, RsaDigest, decode_base64_signature, signed_id};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The signed parameters that name one state change of one trade.
const EVENT_FIELDS: [&str; 5] = [
    "notify_type",
    "trade_no",
    "out_trade_no",
    "trade_status",
    "out_biz_no",
];

/// Verifies an Alipay notification.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let pairs = request.form()?;
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if sorted.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return Err(Rejection::BadRequestBody("form with each parameter once"));
    }
    let field = |name: &str| {
        sorted
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if field("charset").is_some_and(|c| !c.eq_ignore_ascii_case("utf-8")) {
        return Err(Rejection::BadRequestBody("form in utf-8 (charset=utf-8)"));
    }
    let sign = field("sign")
        .filter(|s| !s.is_empty())
        .ok_or(Rejection::SignatureMissing)?;
    let digest = match field("sign_type") {
        None | Some("RSA2") => RsaDigest::Sha256,
        Some("RSA") if preset.allow_rsa1 => RsaDigest::Sha1,
        Some(_) => return Err(Rejection::SignatureInvalid),
    };
    let content = sign_content(&sorted);
    let signature = decode_base64_signature(sign.as_bytes())?;
    let index = preset
        .public_keys
        .verify(None, digest, content.as_bytes(), &signature)?;
    let event = EVENT_FIELDS.iter().filter_map(|name| {
        field(name)
            .filter(|v| !v.is_empty())
            .map(|v| (*name, v.as_bytes()))
    });
    Ok(Authenticity::with_signed_id(index, signed_id(event)))
}

/// The signed content: sorted `k=v` pairs joined by `&`, without `sign`
/// and `sign_type`.
pub fn sign_content(sorted: &[&(String, String)]) -> String {
    let mut content = String::new();
    for (name, value) in sorted {
        if name == "sign" || name == "sign_type" {
            continue;
        }
        if !content.is_empty() {
            content.push('&');
        }
        content.push_str(name);
        content.push('=');
        content.push_str(value);
    }
    content
}
