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
//! below a child of `<xml>`, is refused rather than silently collapsed; and
//! only UTF-8 notifications are read, as for Alipay's `charset`: an XML
//! declaration naming another `encoding` (`GBK`, `UTF-16`, …) is refused
//! as `bad_request_body` (the backend would decode the values otherwise
//! than they were verified).
//!
//! The event id ([`super::signed_id`]) is the signed `transaction_id`,
//! `out_trade_no` and `result_code`: the same across WeChat Pay's retries
//! (which change `nonce_str` and `sign`).

use md5::Md5;
use sha2::{Digest, Sha256};

use super::{Authenticity, Preset, keyed, matching_key, signed_id};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The signed elements that name one payment result.
const EVENT_FIELDS: [&str; 3] = ["transaction_id", "out_trade_no", "result_code"];

/// Verifies a WeChat Pay v2 notification.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    if !declares_utf8(&request.body) {
        return Err(Rejection::BadRequestBody(
            "xml in utf-8 (encoding=\"UTF-8\" or none)",
        ));
    }
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

/// Whether the body's XML declaration, if any, names UTF-8 (or no
/// encoding, which means UTF-8). A declaration naming `encoding` twice, or
/// one that can not be read, is not taken for UTF-8.
fn declares_utf8(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut buffer = Vec::new();
    match reader.read_event_into(&mut buffer) {
        Ok(quick_xml::events::Event::Decl(declaration)) => {
            let named = declaration.matches("encoding").count();
            match declaration.encoding() {
                None => named == 0,
                Some(Ok(name)) => named == 1 && name.eq_ignore_ascii_case("utf-8"),
                Some(Err(_)) => false,
            }
        }
        // No declaration: UTF-8 by default; the parser judges the rest.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::declares_utf8;

    #[test]
    fn only_utf8_declarations_are_read() {
        for body in [
            &b"<xml><a>1</a></xml>"[..],
            b"<?xml version=\"1.0\"?><xml/>",
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><xml/>",
            b"\xEF\xBB\xBF<?xml version='1.0' encoding='utf-8' standalone='yes'?><xml/>",
        ] {
            assert!(declares_utf8(body), "{}", String::from_utf8_lossy(body));
        }
        for body in [
            &b"<?xml version=\"1.0\" encoding=\"GBK\"?><xml/>"[..],
            b"<?xml version=\"1.0\" encoding=\"UTF-16\"?><xml/>",
            b"<?xml version=\"1.0\" encoding='gb2312'?><xml/>",
            b"<?xml version=\"1.0\" encoding=\"UTF-8\" encoding=\"GBK\"?><xml/>",
            b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><xml/>",
        ] {
            assert!(!declares_utf8(body), "{}", String::from_utf8_lossy(body));
        }
    }
}
