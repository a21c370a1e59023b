//! Signature verification: one HMAC core shared by every scheme.
//!
//! The core is three small pieces that every scheme composes:
//! [`Mac`] computes HMAC-SHA-256/512 over the pieces of a signed message,
//! [`matching_secret`] tries every configured secret against every presented
//! signature in constant time per comparison (`subtle`) and without early
//! exit, and [`check_window`] applies the timestamp tolerance with saturating
//! arithmetic in both directions. `scheme = "hmac"` (this file) reads its
//! signature, timestamp and message through selectors and a template;
//! published presets plug in as further [`crate::config::Scheme`] variants
//! on the same core.
//!
//! Nothing here touches the store or logs a secret, a signature or a body.

use std::borrow::Cow;
use std::time::Duration;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit, Mac as _};
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::config::{Algorithm, Encoding, HmacScheme, Scheme, Secret, Segment, TimestampUnit};
use crate::error::Rejection;
use crate::extract::Inbound;

/// Standard base64 that accepts input with or without `=` padding.
pub const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A running HMAC of either width.
enum Mac {
    Sha256(Hmac<Sha256>),
    Sha512(Hmac<Sha512>),
}

impl Mac {
    fn new(algorithm: Algorithm, key: &[u8]) -> Self {
        match algorithm {
            Algorithm::Sha256 => {
                Self::Sha256(Hmac::new_from_slice(key).expect("HMAC takes keys of any length"))
            }
            Algorithm::Sha512 => {
                Self::Sha512(Hmac::new_from_slice(key).expect("HMAC takes keys of any length"))
            }
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(mac) => mac.update(data),
            Self::Sha512(mac) => mac.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Self::Sha256(mac) => mac.finalize().into_bytes().to_vec(),
            Self::Sha512(mac) => mac.finalize().into_bytes().to_vec(),
        }
    }
}

/// HMAC of the concatenation of `message` under `key`.
pub fn mac(algorithm: Algorithm, key: &[u8], message: &[&[u8]]) -> Vec<u8> {
    let mut mac = Mac::new(algorithm, key);
    for piece in message {
        mac.update(piece);
    }
    mac.finish()
}

/// Index of the first secret whose MAC over `message` equals any of
/// `presented`. Every secret and every candidate is compared (no early
/// exit), each comparison in constant time, so timing reveals neither which
/// secret matched nor how much of a signature was right.
pub fn matching_secret(
    algorithm: Algorithm,
    secrets: &[Secret],
    message: &[&[u8]],
    presented: &[Vec<u8>],
) -> Option<usize> {
    let mut found = None;
    for (index, secret) in secrets.iter().enumerate() {
        let expected = mac(algorithm, secret.expose(), message);
        let mut hit = subtle::Choice::from(0);
        for candidate in presented {
            hit |= expected.as_slice().ct_eq(candidate.as_slice());
        }
        if bool::from(hit) && found.is_none() {
            found = Some(index);
        }
    }
    found
}

/// Parses a timestamp: ASCII digits only, at most 19 of them.
pub fn parse_timestamp(raw: &[u8]) -> Result<u64, Rejection> {
    if raw.is_empty() || raw.len() > 19 || !raw.iter().all(u8::is_ascii_digit) {
        return Err(Rejection::TimestampMissing);
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Rejection::TimestampMissing)
}

/// Checks `|now - timestamp| <= tolerance`, past and future alike.
pub fn check_window(
    timestamp: u64,
    unit: TimestampUnit,
    tolerance: Duration,
    now_ms: u64,
) -> Result<(), Rejection> {
    let timestamp_ms = match unit {
        TimestampUnit::Seconds => timestamp.saturating_mul(1_000),
        TimestampUnit::Millis => timestamp,
    };
    let tolerance_ms = u64::try_from(tolerance.as_millis()).unwrap_or(u64::MAX);
    if timestamp_ms.abs_diff(now_ms) <= tolerance_ms {
        Ok(())
    } else {
        Err(Rejection::TimestampOutOfWindow)
    }
}

/// Decodes a presented signature in the configured encoding.
pub fn decode_signature(text: &[u8], encoding: Encoding) -> Option<Vec<u8>> {
    let text = text.trim_ascii();
    match encoding {
        Encoding::Hex => hex::decode(text).ok(),
        Encoding::Base64 => BASE64.decode(text).ok(),
    }
    .filter(|bytes| !bytes.is_empty())
}

/// Proof of authenticity: which secret matched (`None` for `scheme = "none"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authenticity {
    /// Index into the route's `secrets` of the secret that verified.
    pub secret_index: Option<usize>,
}

/// Verifies a request under a route's scheme at time `now_ms`.
pub fn verify(scheme: &Scheme, request: &Inbound, now_ms: u64) -> Result<Authenticity, Rejection> {
    match scheme {
        Scheme::None => Ok(Authenticity { secret_index: None }),
        Scheme::Hmac(hmac) => verify_hmac(hmac, request, now_ms),
    }
}

fn verify_hmac(
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
            Segment::Value(selector) => request.value(selector)?.unwrap_or(Cow::Borrowed(b"")),
        });
    }
    let message: Vec<&[u8]> = pieces.iter().map(|p| p.as_ref()).collect();
    let secret_index = matching_secret(scheme.algorithm, &scheme.secrets, &message, &[signature])
        .ok_or(Rejection::SignatureInvalid)?;
    if let Some((_, value, rule)) = timestamp {
        check_window(value, rule.unit, rule.tolerance, now_ms)?;
    }
    Ok(Authenticity {
        secret_index: Some(secret_index),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Selector, Template, TimestampRule};
    use bytes::Bytes;
    use proptest::prelude::*;

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
                tolerance: Duration::from_secs(300),
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
            let got = verify(&s, &request(Some(&sig), &body("p1", NOW_MS)), NOW_MS).unwrap();
            assert_eq!(got.secret_index, Some(index));
        }
        let sig = signed("other", "p1", NOW_MS);
        assert_eq!(
            verify(&s, &request(Some(&sig), &body("p1", NOW_MS)), NOW_MS),
            Err(Rejection::SignatureInvalid)
        );
    }

    #[test]
    fn reasons_for_each_failure() {
        let s = Scheme::Hmac(scheme(Encoding::Hex, "", true));
        let ok_body = body("p1", NOW_MS);
        assert_eq!(
            verify(&s, &request(None, &ok_body), NOW_MS),
            Err(Rejection::SignatureMissing)
        );
        assert_eq!(
            verify(&s, &request(Some("zz-not-hex"), &ok_body), NOW_MS),
            Err(Rejection::SignatureInvalid)
        );
        let sig = signed("new", "p1", NOW_MS);
        assert_eq!(
            verify(&s, &request(Some(&sig), r#"{"id":"p1"}"#), NOW_MS),
            Err(Rejection::TimestampMissing)
        );
        assert_eq!(
            verify(
                &s,
                &request(Some(&sig), r#"{"id":"p1","ts":"12a"}"#),
                NOW_MS
            ),
            Err(Rejection::TimestampMissing)
        );
        assert_eq!(
            verify(&s, &request(Some(&sig), "not json"), NOW_MS),
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
            let result = verify(&s, &request(Some(&sig), &body("p1", ts)), NOW_MS);
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
                NOW_MS
            )
            .is_ok()
        );
        assert!(
            check_window(
                u64::MAX,
                TimestampUnit::Seconds,
                Duration::from_secs(1),
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
        assert!(verify(&s, &request(Some(&sig), &body("p2", ts)), NOW_MS).is_ok());
        let unprefixed = sig.trim_start_matches("sha256=");
        assert_eq!(
            verify(&s, &request(Some(unprefixed), &body("p2", ts)), NOW_MS),
            Err(Rejection::SignatureInvalid)
        );
    }

    #[test]
    fn sha512_known_answer() {
        // RFC 4231 test case 2.
        let out = mac(
            Algorithm::Sha512,
            b"Jefe",
            &[b"what do ya want ", b"for nothing?"],
        );
        assert_eq!(
            hex::encode(out),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
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
            prop_assert!(verify(&s, &inbound, NOW_MS).is_err());
        }

        #[test]
        fn timestamps_parse_digits_only(raw in proptest::collection::vec(any::<u8>(), 0..30)) {
            let parsed = parse_timestamp(&raw);
            let digits_only = !raw.is_empty() && raw.len() <= 19 && raw.iter().all(u8::is_ascii_digit);
            prop_assert_eq!(parsed.is_ok(), digits_only);
        }
    }
}
