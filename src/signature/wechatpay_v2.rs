//! WeChat Pay API v2 notifications: an XML body `<xml>…</xml>` whose
//! `<sign>` is computed over every other element with a non-empty value,
//! sorted by name, joined as `k=v` with `&`, followed by `&key=<API key>`;
//! as upper-case hex of MD5 of that string, or of its HMAC-SHA256 keyed by
//! the API key. The algorithm is `sign_type` when present (`MD5` or
//! `HMAC-SHA256`), otherwise the signature's length (32 hex digits: MD5,
//! 64: HMAC-SHA256), as the reference verifier does. Values are trimmed
//! as the official Java SDK (`WXPayUtil`) trims them, by the XML parse
//! itself ([`crate::extract::xml::normalise`]): the values signed here are
//! the leaves an `xml:` selector, a key and a fingerprint read, so a
//! re-spelling that verifies can never read differently. No timestamp is
//! signed: deduplication for `retention` is the replay protection (warned
//! about at start-up).
//!
//! Refund notifications carry no `sign` but an AES-256-ECB encrypted
//! `req_info`; decrypting it authenticates nothing (ECB has no integrity:
//! blocks of captured notifications can be spliced), so they are out of
//! scope and answered `signature_missing` (401). Route them elsewhere.
//!
//! Deliberately stricter than the SDK: an element named twice, or nested
//! below a child of `<xml>`, is refused rather than silently collapsed.
//!
//! The event id ([`super::signed_id`]) is the signed `transaction_id`,
//! `out_trade_no` and `result_code`: the same across WeChat Pay's retries
//! (which change `nonce_str` and `sign`).

use md5::Md5;
use sha2::{Digest, Sha256};

use super::{Authenticity, keyed, matching_key, signed_id};
use crate::config::Preset;
use crate::error::Rejection;
use crate::extract::Inbound;

/// The signed elements that name one payment result.
const EVENT_FIELDS: [&str; 3] = ["transaction_id", "out_trade_no", "result_code"];

/// Verifies a WeChat Pay v2 notification.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let document = request.xml()?;
    if document.root() != "xml" {
        return Err(Rejection::SignatureMissing);
    }
    let mut fields: Vec<(&str, &str)> = Vec::with_capacity(document.leaves().len());
    for (path, value) in document.leaves() {
        let name = path
            .strip_prefix("/xml/")
            .filter(|name| !name.contains('/'))
            .ok_or(Rejection::BadRequestBody("xml with flat <xml> fields"))?;
        // Already normalised by the parse, as every other reader sees it.
        fields.push((name, value.as_str()));
    }
    fields.sort_by(|a, b| a.0.cmp(b.0));
    if fields.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return Err(Rejection::BadRequestBody("xml with the element once"));
    }
    let field = |name: &str| fields.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let sign = field("sign")
        .filter(|s| !s.is_empty())
        .ok_or(Rejection::SignatureMissing)?;
    let hmac = match (field("sign_type"), sign.len()) {
        (Some("MD5"), _) | (None, 32) => false,
        (Some("HMAC-SHA256"), _) | (None, 64) => true,
        _ => return Err(Rejection::SignatureInvalid),
    };
    let mut content = String::new();
    for (name, value) in &fields {
        if *name != "sign" && !value.is_empty() {
            content.push_str(name);
            content.push('=');
            content.push_str(value);
            content.push('&');
        }
    }
    content.push_str("key=");
    let index = matching_key(&preset.keys, &[sign.as_bytes()], |key| {
        let digest = if hmac {
            keyed::<::hmac::Hmac<Sha256>>(key, &[content.as_bytes(), key])
        } else {
            let mut md5 = Md5::new();
            md5.update(content.as_bytes());
            md5.update(key);
            md5.finalize().to_vec()
        };
        [hex::encode_upper(digest).into_bytes()]
    })
    .ok_or(Rejection::SignatureInvalid)?;
    let event = EVENT_FIELDS.iter().filter_map(|name| {
        field(name)
            .filter(|v| !v.is_empty())
            .map(|v| (*name, v.as_bytes()))
    });
    Ok(Authenticity::with_signed_id(index, signed_id(event)))
}
