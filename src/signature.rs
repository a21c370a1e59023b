//! Signature verification: one HMAC core shared by every scheme.
//!
//! The core is a handful of small pieces that every scheme composes:
//! [`mac`] computes HMAC-SHA-256/512 over the pieces of a signed message,
//! [`matching_secret`] tries every configured secret against every presented
//! signature in constant time per comparison (`subtle`) and without early
//! exit, [`check_window`] applies a timestamp tolerance with saturating
//! arithmetic, and [`single_header`] reads a signature header strictly
//! (duplicates and oversized values are refused). Each scheme is one file:
//!
//! * [`hmac`] — `scheme = "hmac"`, everything configurable.
//! * [`standard_webhooks`], [`stripe`], [`github`], [`slack`], [`shopify`]
//!   — the published webhook schemes, accepting exactly what the sender's
//!   official verifier library accepts (`tests/vectors/ALGORITHMS.md`).
//! * [`alipay`], [`wechatpay_v2`], [`wechatpay_v3`], [`adyen`], [`twilio`]
//!   — the payment channels' own schemes, RSA ones through
//!   [`PublicKeys`] (`tests/vectors/payments/ALGORITHMS.md`);
//!   each file lists where idemgate is deliberately stricter than the SDK.
//!
//! A preset whose channel names no single event id in a header derives one
//! from signed fields ([`Authenticity::signed_id`], [`signed_id`]), so its
//! default key can never come from an unsigned part of the request.
//!
//! The validated forms the verifiers read, and what idemgate knows about
//! each sender, live here too, below the configuration that builds them
//! (`crate::config` imports this module, never the other way round):
//!
//! * `scheme.rs` — [`Scheme`], [`HmacScheme`] and their parameters.
//! * `preset.rs` — [`PresetKind`] and [`Preset`]: each sender's
//!   credential, window, retry horizon, default key and fingerprint, the
//!   fields a payment channel signs, and its keys' strength and form.
//! * `coverage.rs` — which request parts a scheme signs (signed coverage).
//! * `secret.rs`, `public_key.rs` — key material: [`Secret`] (HMAC keys,
//!   also the admin token and Redis credentials) and [`PublicKeys`] (RSA),
//!   both resolved from `env:`, `file:` or `literal:` and re-read on SIGHUP.
//!
//! Nothing here touches the store or logs a secret, a signature or a body.

pub mod adyen;
pub mod alipay;
mod coverage;
pub mod github;
pub mod hmac;
mod preset;
mod public_key;
mod scheme;
mod secret;
pub mod shopify;
pub mod slack;
pub mod standard_webhooks;
pub mod stripe;
pub mod twilio;
pub mod wechatpay_v2;
pub mod wechatpay_v3;

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::HeaderMap;
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::encoding::BASE64;
use crate::error::Rejection;
use crate::extract::Inbound;

pub use coverage::{RequestPart, unsigned};
pub use preset::{
    Credential, EventId, Preset, PresetKind, decode_hex_key, decode_whsec, secret_strength,
};
pub use public_key::{MAX_RSA_BITS, MIN_RSA_BITS, PublicKeys, RawPublicKey, RsaDigest};
pub use scheme::{
    Algorithm, DEFAULT_TOLERANCE, Encoding, HmacScheme, Scheme, TimestampRule, TimestampUnit,
};
pub use secret::{Derivation, Exposed, ReloadError, ReloadFailure, Secret, Strength};

/// Longest signature header value read; anything longer is refused before
/// any parsing (a real one is well under 1 KiB even with several secrets).
pub const MAX_SIGNATURE_HEADER: usize = 4096;

/// HMAC of the concatenation of `message` under `key`.
pub fn mac(algorithm: Algorithm, key: &[u8], message: &[&[u8]]) -> Vec<u8> {
    use ::hmac::Hmac;
    match algorithm {
        Algorithm::Sha256 => keyed::<Hmac<Sha256>>(key, message),
        Algorithm::Sha512 => keyed::<Hmac<Sha512>>(key, message),
    }
}

/// `M` (an HMAC) of the concatenation of `message` under `key`: also for
/// the presets whose digest is no [`Algorithm`] (Twilio's HMAC-SHA1).
pub fn keyed<M: ::hmac::Mac + ::hmac::KeyInit>(key: &[u8], message: &[&[u8]]) -> Vec<u8> {
    let mut mac =
        <M as ::hmac::KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    for piece in message {
        mac.update(piece);
    }
    mac.finalize().into_bytes().to_vec()
}

/// Lowercase hex of `bytes` in one pass over a buffer of the right size:
/// it runs twice per delivery (the signature and the key hash), so it
/// avoids `hex::encode`'s char-by-char collect (`bench/RESULTS.md`, Profile).
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut out).expect("the buffer is twice the input");
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// How a scheme writes its signature as text. The computed MAC is encoded
/// the same way and compared with the presented text as is: decoding the
/// sender's text instead could fail, or accept several spellings of one MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureEncoding {
    /// Presented signatures are already decoded bytes.
    Raw,
    /// Presented as lowercase hex text (Stripe, GitHub, Slack).
    LowerHex,
    /// Presented as padded standard base64 text (Standard Webhooks, Shopify).
    Base64,
}

impl SignatureEncoding {
    /// `mac` written the way the scheme presents it.
    fn encode(self, mac: Vec<u8>) -> Vec<u8> {
        match self {
            Self::Raw => mac,
            Self::LowerHex => lower_hex(&mac).into_bytes(),
            Self::Base64 => base64::engine::general_purpose::STANDARD
                .encode(mac)
                .into_bytes(),
        }
    }
}

/// Index of the first secret whose MAC over `message`, encoded as `encoding`,
/// equals any of `presented`. Every secret and every candidate is compared
/// (no early exit), each comparison in constant time, so timing reveals
/// neither which secret matched nor how much of a signature was right.
pub fn matching_secret(
    algorithm: Algorithm,
    secrets: &[Secret],
    message: &[&[u8]],
    presented: &[&[u8]],
    encoding: SignatureEncoding,
) -> Option<usize> {
    matching_key(secrets, presented, |key| {
        [encoding.encode(mac(algorithm, key, message))]
    })
}

/// The core of [`matching_secret`] for schemes whose expected signature is
/// not one HMAC (WeChat Pay v2's keyed MD5, Twilio's URL variants):
/// `expected` gives every signature text a key accepts, and each is
/// compared with each presented one, in constant time and without early
/// exit. Returns the index of the first key that matched.
pub fn matching_key<E>(
    secrets: &[Secret],
    presented: &[&[u8]],
    expected: impl Fn(&[u8]) -> E,
) -> Option<usize>
where
    E: IntoIterator<Item = Vec<u8>>,
{
    let mut found = None;
    for (index, secret) in secrets.iter().enumerate() {
        let mut hit = subtle::Choice::from(0);
        for accepted in expected(&secret.expose()) {
            for candidate in presented {
                hit |= accepted.as_slice().ct_eq(candidate);
            }
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

/// Which side of `now` a tolerance applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `|now - timestamp| <= tolerance`.
    Both,
    /// Only too-old timestamps are refused (Stripe's libraries accept
    /// future ones).
    PastOnly,
}

/// Checks a timestamp against the tolerance window.
pub fn check_window(
    timestamp: u64,
    unit: TimestampUnit,
    tolerance: Duration,
    direction: Direction,
    now_ms: u64,
) -> Result<(), Rejection> {
    let timestamp_ms = match unit {
        TimestampUnit::Seconds => timestamp.saturating_mul(1_000),
        TimestampUnit::Millis => timestamp,
    };
    let tolerance_ms = crate::time::millis(tolerance);
    let too_old = now_ms.saturating_sub(timestamp_ms) > tolerance_ms;
    let too_new = timestamp_ms.saturating_sub(now_ms) > tolerance_ms;
    if too_old || (too_new && direction == Direction::Both) {
        Err(Rejection::TimestampOutOfWindow)
    } else {
        Ok(())
    }
}

/// Reads a header that must appear at most once. Absent or empty: `None`.
/// Repeated or longer than [`MAX_SIGNATURE_HEADER`]: `signature_invalid`,
/// since a sender never does either.
pub fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a [u8]>, Rejection> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() || first.len() > MAX_SIGNATURE_HEADER {
        return Err(Rejection::SignatureInvalid);
    }
    let value = first.as_bytes().trim_ascii();
    Ok((!value.is_empty()).then_some(value))
}

/// Proof of authenticity, as far as the route's scheme establishes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Authenticity {
    /// Index into the route's `secrets` of the secret that verified
    /// (`None` for `scheme = "none"`). Logged and counted, never the secret.
    pub secret_index: Option<usize>,
    /// The event id the signature covers: read it with
    /// [`Authenticity::signed_id`].
    event: SignedEvent,
}

/// Where a verified request's event id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SignedEvent {
    /// Signed as is (standard-webhooks), or derived from signed fields
    /// ([`signed_id`]); `None` where the scheme establishes none or the
    /// request lacks those fields.
    Id(Option<Bytes>),
    /// The signed body itself ([`body_id`]): hashed only when a key asks
    /// for it, so a route keyed on something else does not hash its body
    /// a second time.
    Body,
}

impl Default for SignedEvent {
    fn default() -> Self {
        Self::Id(None)
    }
}

impl Authenticity {
    /// Verified by the secret at `index`.
    pub fn by_secret(index: usize) -> Self {
        Self {
            secret_index: Some(index),
            event: SignedEvent::default(),
        }
    }

    /// Verified by the key at `index`, with the event id derived from the
    /// signed fields (or signed as is).
    pub fn with_signed_id(index: usize, signed_id: Option<Bytes>) -> Self {
        Self {
            secret_index: Some(index),
            event: SignedEvent::Id(signed_id),
        }
    }

    /// Verified by the key at `index`, a scheme that signs the body and
    /// nothing else (GitHub, Shopify): the event id is the body's.
    pub fn with_signed_body(index: usize) -> Self {
        Self {
            secret_index: Some(index),
            event: SignedEvent::Body,
        }
    }

    /// The event id the signature covers, where the scheme signs one
    /// (standard-webhooks) or the preset derives one from signed content
    /// ([`signed_id`], [`body_id`] of `body`, the body this verified); the
    /// preset's default idempotency key.
    pub fn signed_id(&self, body: &[u8]) -> Option<Bytes> {
        match &self.event {
            SignedEvent::Id(id) => id.clone(),
            SignedEvent::Body => body_id(body),
        }
    }
}

/// An event id built from signed fields: lowercase hex SHA-256 over each
/// present `(name, value)`, both length-prefixed, so no two field sets
/// read alike and the id fits a key part whatever the values' length.
/// `None` when no field is present (a missing key, as the route decides).
pub fn signed_id<'a>(fields: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Option<Bytes> {
    use sha2::Digest;
    let mut hasher = Sha256::new();
    let mut any = false;
    for (name, value) in fields {
        for piece in [name.as_bytes(), value] {
            let length = u32::try_from(piece.len()).unwrap_or(u32::MAX);
            hasher.update(length.to_be_bytes());
            hasher.update(piece);
        }
        any = true;
    }
    any.then(|| Bytes::from(lower_hex(&hasher.finalize())))
}

/// The event id of a scheme that signs the body and nothing else (GitHub,
/// Shopify): the [`signed_id`] of the body, so no unsigned header can
/// make a captured body a new delivery.
pub fn body_id(body: &[u8]) -> Option<Bytes> {
    signed_id([("body", body)])
}

/// Decodes a standard-base64 signature (padding optional, whitespace not
/// allowed); an undecodable one is `signature_invalid`.
pub fn decode_base64_signature(text: &[u8]) -> Result<Vec<u8>, Rejection> {
    BASE64.decode(text).map_err(|_| Rejection::SignatureInvalid)
}

/// Verifies a request under a route's scheme at time `now_ms`.
pub fn verify(scheme: &Scheme, request: &Inbound, now_ms: u64) -> Result<Authenticity, Rejection> {
    match scheme {
        Scheme::None => Ok(Authenticity::default()),
        Scheme::Hmac(generic) => hmac::verify(generic, request, now_ms),
        Scheme::Preset(preset) => match preset.kind {
            PresetKind::StandardWebhooks => standard_webhooks::verify(preset, request, now_ms),
            PresetKind::Stripe => stripe::verify(preset, request, now_ms),
            PresetKind::Github => github::verify(preset, request),
            PresetKind::Slack => slack::verify(preset, request, now_ms),
            PresetKind::Shopify => shopify::verify(preset, request),
            PresetKind::Alipay => alipay::verify(preset, request),
            PresetKind::WechatpayV2 => wechatpay_v2::verify(preset, request),
            PresetKind::WechatpayV3 => wechatpay_v3::verify(preset, request, now_ms),
            PresetKind::Adyen => adyen::verify(preset, request),
            PresetKind::Twilio => twilio::verify(preset, request),
        },
    }
}

/// The shared check of every preset: HMAC-SHA-256 of `message` under one
/// of the preset's keys, encoded as `encoding`, must equal one of `presented`.
/// Returns the index of the key that matched.
fn preset_signature(
    preset: &Preset,
    message: &[&[u8]],
    presented: &[&[u8]],
    encoding: SignatureEncoding,
) -> Result<usize, Rejection> {
    matching_secret(
        Algorithm::Sha256,
        &preset.keys,
        message,
        presented,
        encoding,
    )
    .ok_or(Rejection::SignatureInvalid)
}

/// The window check of a preset that signs a timestamp (in seconds).
fn preset_window(
    preset: &Preset,
    timestamp: u64,
    direction: Direction,
    now_ms: u64,
) -> Result<(), Rejection> {
    let tolerance = preset.tolerance.unwrap_or(DEFAULT_TOLERANCE);
    check_window(
        timestamp,
        TimestampUnit::Seconds,
        tolerance,
        direction,
        now_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_hex_matches_the_hex_crate() {
        for bytes in [&b""[..], b"\x00\xff\x10", &[0xab; 32]] {
            assert_eq!(lower_hex(bytes), hex::encode(bytes));
        }
    }
    use proptest::prelude::*;

    const NOW_MS: u64 = 1_700_000_000_000;

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

    #[test]
    fn windows_in_both_directions_and_past_only() {
        let tol = Duration::from_secs(300);
        let at = |offset_s: i64| (NOW_MS as i64 / 1000 + offset_s) as u64;
        for (offset, both, past_only) in [
            (-300, true, true),
            (300, true, true),
            (-301, false, false),
            (301, false, true),
        ] {
            let check =
                |d| check_window(at(offset), TimestampUnit::Seconds, tol, d, NOW_MS).is_ok();
            assert_eq!(check(Direction::Both), both, "{offset}");
            assert_eq!(check(Direction::PastOnly), past_only, "{offset}");
        }
        assert!(
            check_window(
                u64::MAX,
                TimestampUnit::Seconds,
                tol,
                Direction::Both,
                NOW_MS
            )
            .is_err()
        );
        assert!(check_window(0, TimestampUnit::Millis, tol, Direction::PastOnly, NOW_MS).is_err());
    }

    #[test]
    fn duplicated_oversized_and_empty_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(single_header(&headers, "x-sig"), Ok(None));
        headers.insert("x-sig", " ".parse().unwrap());
        assert_eq!(single_header(&headers, "x-sig"), Ok(None));
        headers.insert("x-sig", "abc".parse().unwrap());
        assert_eq!(single_header(&headers, "X-Sig"), Ok(Some(&b"abc"[..])));
        headers.append("x-sig", "def".parse().unwrap());
        assert_eq!(
            single_header(&headers, "x-sig"),
            Err(Rejection::SignatureInvalid)
        );
        headers.insert(
            "x-sig",
            "a".repeat(MAX_SIGNATURE_HEADER + 1).parse().unwrap(),
        );
        assert_eq!(
            single_header(&headers, "x-sig"),
            Err(Rejection::SignatureInvalid)
        );
    }

    #[test]
    fn rotation_reports_the_matching_index() {
        let secrets = [Secret::from_bytes("new"), Secret::from_bytes("old")];
        let message: [&[u8]; 1] = [b"m"];
        let old = hex::encode(mac(Algorithm::Sha256, b"old", &message));
        let found = matching_secret(
            Algorithm::Sha256,
            &secrets,
            &message,
            &[b"zz", old.as_bytes()],
            SignatureEncoding::LowerHex,
        );
        assert_eq!(found, Some(1));
        let upper = old.to_uppercase();
        assert_eq!(
            matching_secret(
                Algorithm::Sha256,
                &secrets,
                &message,
                &[upper.as_bytes()],
                SignatureEncoding::LowerHex
            ),
            None,
            "hex schemes compare text, as their libraries do"
        );
    }

    proptest! {
        #[test]
        fn timestamps_parse_digits_only(raw in proptest::collection::vec(any::<u8>(), 0..30)) {
            let parsed = parse_timestamp(&raw);
            let digits_only = !raw.is_empty() && raw.len() <= 19 && raw.iter().all(u8::is_ascii_digit);
            prop_assert_eq!(parsed.is_ok(), digits_only);
        }
    }
}
