//! Twilio: `X-Twilio-Signature` is the base64 HMAC-SHA1, keyed by the auth
//! token as text, of the full URL Twilio called followed by every POST
//! parameter as `name` + `value` with no separators, sorted by name (and
//! the values of a repeated name sorted too). A JSON body is signed
//! through the URL instead: its query carries `bodySHA256=<hex SHA-256 of
//! the body>` and no parameters are appended (twilio `validateRequest`,
//! `validateRequestWithBody`).
//!
//! idemgate sees only its own address, so the URL is the route's
//! `public_url` followed by the path and query as received. Like the SDK,
//! the URL is tried as is, with the scheme's default port added, and with
//! its port removed; the SDK's further fallbacks (the URL re-normalised,
//! the query re-encoded) are not tried, so a URL the sender mangled is
//! refused. A repeated parameter with one value twice counts once, as in
//! the SDK. `X-Twilio-Webhooks-Signature-Settings: …algorithm=HMAC_SHA256`
//! selects HMAC-SHA256, as the SDK does.
//!
//! Twilio's signed content joins names and values with no separator, so a
//! parameter boundary can move without breaking the signature: `A=bc`
//! re-sent as `Ab=c` (or `Ab=` + `c`) verifies, in the SDK as here. The
//! event id is that same joined content, so such a copy is the same
//! delivery (a replay or a 422), never a second execution; but a copy sent
//! before Twilio's own reaches the handler with the altered parameters.
//!
//! Twilio signs no timestamp: deduplication for `retention` is the replay
//! protection (warned about at start-up). The unsigned
//! `I-Twilio-Idempotency-Token` header is never a default key: the event
//! id ([`super::signed_id`]) is the signed content itself (path, query and
//! sorted parameters), so reordering or repeating parameters, which keeps
//! the signature valid, can not make a captured request a new delivery.

use ::hmac::Hmac;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::{Authenticity, Preset, keyed, matching_key, signed_id, single_header};
use crate::error::Rejection;
use crate::extract::Inbound;

/// Verifies a Twilio request.
pub fn verify(preset: &Preset, request: &Inbound) -> Result<Authenticity, Rejection> {
    let presented = single_header(&request.parts.headers, "x-twilio-signature")?
        .ok_or(Rejection::SignatureMissing)?;
    let base = preset.public_url.as_deref().unwrap_or_default();
    let path = request
        .parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str());
    let url = format!("{base}{path}");
    let params = match body_hash(request) {
        Some(hash) => {
            let actual = super::lower_hex(&Sha256::digest(&request.body));
            if !bool::from(subtle::ConstantTimeEq::ct_eq(
                actual.as_bytes(),
                hash.as_bytes(),
            )) {
                return Err(Rejection::SignatureInvalid);
            }
            String::new()
        }
        None => sorted_params(request.form()?),
    };
    let sha256 = single_header(
        &request.parts.headers,
        "x-twilio-webhooks-signature-settings",
    )?
    .is_some_and(|settings| {
        settings
            .split(|b| *b == b',')
            .any(|item| item.trim_ascii() == b"algorithm=HMAC_SHA256")
    });
    let urls = url_variants(&url);
    let index = matching_key(&preset.keys, &[presented], |token| {
        urls.iter()
            .map(|url| {
                let message: [&[u8]; 2] = [url.as_bytes(), params.as_bytes()];
                let digest = if sha256 {
                    keyed::<Hmac<Sha256>>(token, &message)
                } else {
                    keyed::<Hmac<Sha1>>(token, &message)
                };
                STANDARD.encode(digest).into_bytes()
            })
            .collect::<Vec<_>>()
    })
    .ok_or(Rejection::SignatureInvalid)?;
    let id = signed_id([("url", path.as_bytes()), ("params", params.as_bytes())]);
    Ok(Authenticity::with_signed_id(index, id))
}

/// The `bodySHA256` query parameter, when the sender signed a JSON body.
fn body_hash(request: &Inbound) -> Option<String> {
    let query = request.parts.uri.query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "bodySHA256")
        .map(|(_, value)| value.into_owned())
}

/// `name` + `value` of every parameter, sorted by name, then value, a
/// pair sent twice counted once.
pub fn sorted_params(pairs: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort();
    sorted.dedup();
    sorted
        .iter()
        .flat_map(|(name, value)| [name.as_str(), value.as_str()])
        .collect()
}

/// The URL as given, with the default port added, and without its port.
pub fn url_variants(url: &str) -> Vec<String> {
    let mut variants = vec![url.to_owned()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return variants;
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => {
            let port = if scheme == "https" { "443" } else { "80" };
            variants.push(format!("{scheme}://{authority}:{port}{tail}"));
            return variants;
        }
    };
    variants.push(format!("{scheme}://{host}{tail}"));
    variants
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_forms_the_sdk_accepts() {
        assert_eq!(
            url_variants("https://h.example.com/sms?a=1"),
            [
                "https://h.example.com/sms?a=1",
                "https://h.example.com:443/sms?a=1"
            ]
        );
        assert_eq!(
            url_variants("http://h:8080/x"),
            ["http://h:8080/x", "http://h/x"]
        );
        assert_eq!(url_variants("https://h"), ["https://h", "https://h:443"]);
    }

    #[test]
    fn parameters_sort_by_name_then_value() {
        let pairs = [("b", "2"), ("a", "z"), ("a", "y"), ("a", "z")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(sorted_params(&pairs), "ayazb2");
    }
}
