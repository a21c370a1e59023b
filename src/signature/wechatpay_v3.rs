//! WeChat Pay API v3 notifications: `Wechatpay-Signature` is the base64
//! SHA256withRSA signature of `{Wechatpay-Timestamp}\n{Wechatpay-Nonce}\n
//! {body}\n`, made with the platform key that `Wechatpay-Serial` names (a
//! platform certificate's serial, or `PUB_KEY_ID_…` in public-key mode),
//! and the timestamp must be within five minutes of now, either side
//! (wechatpay-java `WechatPay2Validator`, wechatpay-axios-plugin).
//!
//! Deliberately stricter than the SDKs: the four headers must each appear
//! once, and a serial no configured key answers to is `signature_invalid`
//! (the SDKs with automatic certificate download would fetch a new
//! certificate; idemgate trusts only what the operator configured, and a
//! rotation is an added `public_keys` entry and a SIGHUP).

use super::{
    Authenticity, Direction, Preset, RsaDigest, decode_base64_signature, parse_timestamp,
    preset_window, single_header,
};
use crate::error::Rejection;
use crate::extract::Inbound;

/// Verifies a WeChat Pay v3 notification at time `now_ms`.
pub fn verify(preset: &Preset, request: &Inbound, now_ms: u64) -> Result<Authenticity, Rejection> {
    let headers = &request.parts.headers;
    let signature =
        single_header(headers, "wechatpay-signature")?.ok_or(Rejection::SignatureMissing)?;
    let serial = single_header(headers, "wechatpay-serial")?.ok_or(Rejection::SignatureInvalid)?;
    let serial = std::str::from_utf8(serial).map_err(|_| Rejection::SignatureInvalid)?;
    let timestamp =
        single_header(headers, "wechatpay-timestamp")?.ok_or(Rejection::TimestampMissing)?;
    let nonce = single_header(headers, "wechatpay-nonce")?.ok_or(Rejection::SignatureInvalid)?;
    preset_window(preset, parse_timestamp(timestamp)?, Direction::Both, now_ms)?;
    let signature = decode_base64_signature(signature)?;
    let mut message = Vec::with_capacity(timestamp.len() + nonce.len() + request.body.len() + 3);
    for piece in [timestamp, nonce, &request.body] {
        message.extend_from_slice(piece);
        message.push(b'\n');
    }
    preset
        .public_keys
        .verify(Some(serial), RsaDigest::Sha256, &message, &signature)
        .map(Authenticity::by_secret)
}
