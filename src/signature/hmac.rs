//! `scheme = "hmac"`: the generic, fully configurable scheme for bespoke
//! gateways — signature and timestamp read through selectors, the signed
//! content built from a `{…}` template, hex or base64 with an optional
//! prefix, SHA-256 or SHA-512, a window in seconds or milliseconds in both
//! directions. The presented signature is decoded (hex case-insensitive,
//! base64 with or without padding) and compared as bytes. A header the
//! template names must appear once: a key or fingerprint reads the value
//! signed here (`coverage.rs`).

use std::borrow::Cow;

use base64::Engine;

use super::{
    Authenticity, BASE64, Direction, Encoding, HmacScheme, SignatureEncoding, check_window,
    matching_secret, parse_timestamp,
};
use crate::error::Rejection;
use crate::extract::{Inbound, Segment, Selector};

/// Decodes a presented signature in the configured encoding.
pub fn decode_signature(text: &[u8], encoding: Encoding) -> Option<Vec<u8>> {
    let text = text.trim_ascii();
    match encoding {
        Encoding::Hex => hex::decode(text).ok(),
        Encoding::Base64 => BASE64.decode(text).ok(),
    }
    .filter(|bytes| !bytes.is_empty())
}

/// Verifies `request` under a generic HMAC scheme at `now_ms`.
pub fn verify(
    scheme: &HmacScheme,
    request: &Inbound,
    now_ms: u64,
) -> Result<Authenticity, Rejection> {
    let presented = request
        .value(&scheme.signature)?
        .filter(|v| !v.trim_ascii().is_empty())
        .ok_or(Rejection::SignatureMissing)?;
    let timestamp = match &scheme.timestamp {
        Some(rule) => {
            let raw = request
                .value(&rule.selector)?
                .ok_or(Rejection::TimestampMissing)?;
            let value = parse_timestamp(raw.trim_ascii())?;
            Some((raw, value, rule))
        }
        None => None,
    };
    let signature = presented
        .trim_ascii()
        .strip_prefix(scheme.prefix.as_bytes())
        .and_then(|text| decode_signature(text, scheme.encoding))
        .ok_or(Rejection::SignatureInvalid)?;

    let mut pieces: Vec<Cow<'_, [u8]>> = Vec::with_capacity(scheme.message.segments.len());
    for segment in &scheme.message.segments {
        pieces.push(match segment {
            Segment::Literal(text) => Cow::Borrowed(text.as_bytes()),
            Segment::Body => Cow::Borrowed(&request.body[..]),
            Segment::Method => Cow::Borrowed(request.parts.method.as_str().as_bytes()),
            Segment::Path => Cow::Borrowed(request.parts.uri.path().as_bytes()),
            Segment::Timestamp => match &timestamp {
                Some((raw, _, _)) => Cow::Borrowed(raw.trim_ascii()),
                None => Cow::Borrowed(&b""[..]),
            },
            Segment::Value(selector) => {
                // A key or fingerprint reading this header must read the
                // one value signed here, not a second one sent beside it.
                if let Selector::Header(name) = selector
                    && request.parts.headers.get_all(name).iter().nth(1).is_some()
                {
                    return Err(Rejection::SignatureInvalid);
                }
                request.value(selector)?.unwrap_or(Cow::Borrowed(b""))
            }
        });
    }
    let message: Vec<&[u8]> = pieces.iter().map(|p| p.as_ref()).collect();
    let index = matching_secret(
        scheme.algorithm,
        &scheme.secrets,
        &message,
        &[&signature],
        SignatureEncoding::Raw,
    )
    .ok_or(Rejection::SignatureInvalid)?;
    if let Some((_, value, rule)) = timestamp {
        check_window(value, rule.unit, rule.tolerance, Direction::Both, now_ms)?;
    }
    Ok(Authenticity::by_secret(index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::{Selector, Template};
    use crate::signature::BASE64;
    use crate::signature::{Algorithm, Scheme, Secret, TimestampRule, TimestampUnit};
    use crate::signature::{Direction, check_window, mac, verify as verify_scheme};
    use bytes::Bytes;
    use proptest::prelude::*;
    use std::time::Duration;

    const NOW_MS: u64 = 1_700_000_000_000;

    fn scheme(encoding: Encoding, prefix: &str, ms: bool) -> HmacScheme {
        HmacScheme {
            secrets: vec![Secret::from_bytes("new"), Secret::from_bytes("old")],
            algorithm: Algorithm::Sha256,
            signature: Selector::parse("header:x-signature").unwrap(),
            encoding,
            prefix: prefix.to_owned(),
            message: Template::parse("{json:/id}\n{timestamp}").unwrap(),
            timestamp: Some(TimestampRule {
                selector: Selector::parse("json:/ts").unwrap(),
                unit: if ms {
                    TimestampUnit::Millis
                } else {
                    TimestampUnit::Seconds
                },
                tolerance: crate::signature::DEFAULT_TOLERANCE,
            }),
        }
    }

    fn request(signature: Option<&str>, body: &str) -> Inbound {
        let mut builder = http::Request::builder().method("POST").uri("/notify");
        if let Some(sig) = signature {
            builder = builder.header("x-signature", sig);
        }
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        Inbound::new(parts, Bytes::from(body.to_owned()))
    }

    fn signed(key: &str, id: &str, ts: u64) -> String {
        hex::encode(mac(
            Algorithm::Sha256,
            key.as_bytes(),
            &[id.as_bytes(), b"\n", ts.to_string().as_bytes()],
        ))
    }

    fn body(id: &str, ts: u64) -> String {
        format!(r#"{{"id":"{id}","ts":{ts}}}"#)
    }

    #[test]
    fn accepts_either_rotated_secret_and_reports_which() {
        let s = Scheme::Hmac(scheme(Encoding::Hex, "", true));
        for (key, index) in [("new", 0), ("old", 1)] {
            let sig = signed(key, "p1", NOW_MS);
            let got = verify_scheme(&s, &request(Some(&sig), &body("p1", NOW_MS)), NOW_MS).unwrap();
            assert_eq!(got.secret_index, Some(index));
        }
        let sig = signed("other", "p1", NOW_MS);
        assert_eq!(
            verify_scheme(&s, &request(Some(&sig), &body("p1", NOW_MS)), NOW_MS),
            Err(Rejection::SignatureInvalid)
        );
    }

    #[test]
    fn reasons_for_each_failure() {
        let s = Scheme::Hmac(scheme(Encoding::Hex, "", true));
        let ok_body = body("p1", NOW_MS);
        assert_eq!(
            verify_scheme(&s, &request(None, &ok_body), NOW_MS),
            Err(Rejection::SignatureMissing)
        );
        assert_eq!(
            verify_scheme(&s, &request(Some("zz-not-hex"), &ok_body), NOW_MS),
            Err(Rejection::SignatureInvalid)
        );
        let sig = signed("new", "p1", NOW_MS);
        assert_eq!(
            verify_scheme(&s, &request(Some(&sig), r#"{"id":"p1"}"#), NOW_MS),
            Err(Rejection::TimestampMissing)
        );
        assert_eq!(
            verify_scheme(
                &s,
                &request(Some(&sig), r#"{"id":"p1","ts":"12a"}"#),
                NOW_MS
            ),
            Err(Rejection::TimestampMissing)
        );
        assert_eq!(
            verify_scheme(&s, &request(Some(&sig), "not json"), NOW_MS),
            Err(Rejection::BadRequestBody("json"))
        );
    }

    #[test]
    fn window_edges_in_both_directions() {
        let s = Scheme::Hmac(scheme(Encoding::Hex, "", true));
        let tolerance = 300_000;
        for (ts, ok) in [
            (NOW_MS - tolerance, true),
            (NOW_MS + tolerance, true),
            (NOW_MS - tolerance - 1, false),
            (NOW_MS + tolerance + 1, false),
        ] {
            let sig = signed("new", "p1", ts);
            let result = verify_scheme(&s, &request(Some(&sig), &body("p1", ts)), NOW_MS);
            assert_eq!(
                result.is_ok(),
                ok,
                "ts offset {}",
                ts as i64 - NOW_MS as i64
            );
            if !ok {
                assert_eq!(result, Err(Rejection::TimestampOutOfWindow));
            }
        }
        assert!(
            check_window(
                1_700_000_000,
                TimestampUnit::Seconds,
                Duration::from_secs(1),
                Direction::Both,
                NOW_MS
            )
            .is_ok()
        );
        assert!(
            check_window(
                u64::MAX,
                TimestampUnit::Seconds,
                Duration::from_secs(1),
                Direction::Both,
                NOW_MS
            )
            .is_err()
        );
    }

    #[test]
    fn prefix_and_base64() {
        let s = Scheme::Hmac(scheme(Encoding::Base64, "sha256=", false));
        let ts = NOW_MS / 1000;
        let raw = mac(
            Algorithm::Sha256,
            b"old",
            &[b"p2", b"\n", ts.to_string().as_bytes()],
        );
        let sig = format!("sha256={}", BASE64.encode(raw));
        assert!(verify_scheme(&s, &request(Some(&sig), &body("p2", ts)), NOW_MS).is_ok());
        let unprefixed = sig.trim_start_matches("sha256=");
        assert_eq!(
            verify_scheme(&s, &request(Some(unprefixed), &body("p2", ts)), NOW_MS),
            Err(Rejection::SignatureInvalid)
        );
    }

    #[test]
    fn a_signed_header_sent_twice_is_refused() {
        let mut s = scheme(Encoding::Hex, "", false);
        s.message = Template::parse("{header:x-id}.{body}").unwrap();
        s.timestamp = None;
        let sig = hex::encode(mac(Algorithm::Sha256, b"new", &[b"evt-1.", b"{}"]));
        let send = |ids: &[&str]| {
            let mut builder = http::Request::post("/notify").header("x-signature", &sig);
            for id in ids {
                builder = builder.header("x-id", *id);
            }
            let (parts, ()) = builder.body(()).unwrap().into_parts();
            verify(&s, &Inbound::new(parts, Bytes::from_static(b"{}")), NOW_MS)
        };
        assert!(send(&["evt-1"]).is_ok());
        // A key or fingerprint reading every x-id would see one the
        // signature never covered.
        assert_eq!(send(&["evt-1", "evt-2"]), Err(Rejection::SignatureInvalid));
    }

    proptest! {
        #[test]
        fn arbitrary_headers_and_bodies_never_panic(
            sig in proptest::collection::vec(any::<u8>(), 0..120),
            body in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let s = Scheme::Hmac(scheme(Encoding::Base64, "v1=", true));
            let mut parts = http::Request::new(()).into_parts().0;
            if let Ok(value) = http::HeaderValue::from_bytes(&sig) {
                parts.headers.insert("x-signature", value);
            }
            let inbound = Inbound::new(parts, Bytes::from(body));
            prop_assert!(verify_scheme(&s, &inbound, NOW_MS).is_err());
        }

    }
}
