//! Property-based fuzzing of the payment-channel presets (alipay,
//! wechatpay-v2, wechatpay-v3, adyen, twilio), with the credentials of
//! their vectors (tests/vectors/payments.json), and of the canonicalisation
//! helpers they share with nothing else.
//!
//! Properties:
//!
//! * `fuzz_payment_parsers`: arbitrary bodies (raw bytes, form bodies with
//!   random pairs incl. `sign`/`sign_type`, `<xml>` bodies with random
//!   elements, CDATA, references and DTDs, JSON with random
//!   `notificationItems`) and arbitrary values in every header a payment
//!   scheme reads never panic and never verify.
//! * `fuzz_payment_vector_mutations`: one byte of a valid vector flipped,
//!   inserted or deleted, anywhere in its body or in a header its signature
//!   depends on, never panics, and verifies only when the mutated request
//!   means the same: its signed content as the channel defines it (decoded
//!   form pairs, XML element values, the JSON fields an Adyen item signs,
//!   WeChat Pay v3's exact timestamp, nonce and body bytes, Twilio's URL and
//!   sorted parameters run together) and its decoded signature are those
//!   of the original, and so is [`Authenticity::signed_id`]. (A byte change
//!   can keep the meaning: `%2F` for `%2f` in a form, a space between JSON
//!   tokens, whitespace around a header value, a leading zero in a
//!   certificate serial, and, since Twilio signs `name` + `value` with no
//!   separator, a deleted `=` in `ApiVersion=2010-04-01`: the SDK accepts
//!   that too, and the handler then reads other parameters than were sent.)
//! * `alipay_sign_content_*`, `twilio_sorted_params_*`, `twilio_url_variants_*`:
//!   the helpers' documented shapes; see each test.
//!
//! Longer fuzzing: `PROPTEST_CASES=20000 cargo test --release --test suite payment_fuzz`.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use bytes::Bytes;
use idemgate::config::{Config, Scheme};
use idemgate::error::Rejection;
use idemgate::extract::Inbound;
use idemgate::signature::{self, Authenticity, alipay, twilio};
use proptest::prelude::*;
use serde_json::Value;

use crate::support::*;

mod arbitrary;
use arbitrary::{body_strategy, headers_strategy};

const SCHEMES: [&str; 5] = ["alipay", "wechatpay-v2", "wechatpay-v3", "adyen", "twilio"];

/// Every header a payment scheme reads.
const HEADERS: [&str; 6] = [
    "wechatpay-signature",
    "wechatpay-serial",
    "wechatpay-timestamp",
    "wechatpay-nonce",
    "x-twilio-signature",
    "x-twilio-webhooks-signature-settings",
];

/// The clock of the vectors without one (seconds).
const NOW_S: u64 = 1_700_000_000;

/// Standard base64, padding optional: how the verifiers decode.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// The vectors that verify (`REFUSED_PAYMENT_VECTORS` says which do not).
fn valid_vectors() -> &'static [PaymentVector] {
    static VECTORS: std::sync::OnceLock<Vec<PaymentVector>> = std::sync::OnceLock::new();
    VECTORS.get_or_init(verifiable_payment_vectors)
}

/// One scheme per preset, with every credential of its vectors (Alipay
/// also accepting RSA1), built once.
fn scheme_of(name: &str) -> &'static Scheme {
    static SCHEMES_BUILT: std::sync::OnceLock<BTreeMap<&'static str, Scheme>> =
        std::sync::OnceLock::new();
    let built = SCHEMES_BUILT.get_or_init(|| {
        SCHEMES
            .iter()
            .map(|scheme| {
                let mut credentials: Vec<String> = valid_vectors()
                    .iter()
                    .filter(|v| v.scheme == *scheme)
                    .map(right_credential)
                    .collect();
                credentials.sort();
                credentials.dedup();
                let extra = if *scheme == "alipay" {
                    "allow_rsa1 = true\n"
                } else {
                    ""
                };
                let text = format!(
                    "{}[[route]]\nname = \"fuzz\"\npath_prefix = \"/hooks\"\n[route.signature]\n{}\n",
                    base_sections(
                        "kind = \"embedded\"\npath = \"/tmp/unused.redb\"",
                        "http://127.0.0.1:1"
                    ),
                    payment_signature(scheme, &credentials, extra)
                );
                let scheme_built = Config::parse(&text)
                    .unwrap_or_else(|e| panic!("{scheme}: {e}"))
                    .routes
                    .remove(0)
                    .scheme;
                (*scheme, scheme_built)
            })
            .collect()
    });
    &built[name]
}

/// A request as bytes: header values that `http` refuses are left out (a
/// server never hands them on).
#[derive(Debug, Clone)]
struct Raw {
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Raw {
    fn of(vector: &PaymentVector) -> Self {
        Self {
            path: vector.path.clone(),
            headers: vector
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                .collect(),
            body: vector.body.clone().into_bytes(),
        }
    }

    fn inbound(&self) -> Inbound {
        let mut request = http::Request::post(self.path.as_str());
        for (name, value) in &self.headers {
            if let Ok(value) = http::HeaderValue::from_bytes(value) {
                request = request.header(name.as_str(), value);
            }
        }
        let (parts, ()) = request.body(()).unwrap().into_parts();
        Inbound::new(parts, Bytes::from(self.body.clone()))
    }

    /// The value of `name` as the verifiers read it (trimmed), if valid.
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .filter(|(_, v)| http::HeaderValue::from_bytes(v).is_ok())
            .map(|(_, v)| v.trim_ascii().to_vec())
    }
}

fn verify(scheme: &str, raw: &Raw, now_s: u64) -> Result<Authenticity, Rejection> {
    signature::verify(scheme_of(scheme), &raw.inbound(), now_s * 1000)
}

// --- what a request means ---------------------------------------------------

fn form_pairs(body: &[u8]) -> Option<Vec<(String, String)>> {
    std::str::from_utf8(body).ok()?;
    Some(
        form_urlencoded::parse(body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    )
}

fn decoded(text: &[u8]) -> Option<Vec<u8>> {
    BASE64.decode(text).ok()
}

/// What a request's signature covers and the signature itself, decoded, as
/// the channel defines them; `None` when it cannot be read.
fn meaning(scheme: &str, raw: &Raw) -> Option<(Vec<u8>, Vec<u8>)> {
    match scheme {
        "alipay" => {
            let mut pairs = form_pairs(&raw.body)?;
            pairs.sort();
            let sign = pairs.iter().find(|(k, _)| k == "sign")?.1.clone();
            let content: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| k != "sign")
                .map(|(k, v)| format!("{k:?}={v:?}"))
                .collect();
            Some((content.join("&").into_bytes(), decoded(sign.as_bytes())?))
        }
        "wechatpay-v2" => {
            let inbound = raw.inbound();
            let document = inbound.xml().ok()?;
            let mut leaves: Vec<(String, String)> = document
                .leaves()
                .iter()
                .map(|(k, v)| (k.clone(), v.trim().to_owned()))
                .filter(|(_, v)| !v.is_empty())
                .collect();
            leaves.sort();
            let sign = leaves.iter().find(|(k, _)| k == "/xml/sign")?.1.clone();
            let content: Vec<String> = leaves
                .iter()
                .filter(|(k, _)| k != "/xml/sign")
                .map(|(k, v)| format!("{k:?}={v:?}"))
                .collect();
            Some((content.join("&").into_bytes(), sign.into_bytes()))
        }
        "wechatpay-v3" => {
            let mut content = Vec::new();
            content.extend(serial_number(&raw.header("wechatpay-serial")?));
            for name in ["wechatpay-timestamp", "wechatpay-nonce"] {
                content.push(b'\n');
                content.extend(raw.header(name)?);
            }
            content.push(b'\n');
            content.extend(&raw.body);
            Some((content, decoded(&raw.header("wechatpay-signature")?)?))
        }
        "adyen" => {
            let body: Value = serde_json::from_slice(&raw.body).ok()?;
            let mut content = Vec::new();
            let mut signatures = Vec::new();
            for item in body.pointer("/notificationItems")?.as_array()? {
                let item = item.get("NotificationRequestItem")?;
                for pointer in [
                    "/pspReference",
                    "/originalReference",
                    "/merchantAccountCode",
                    "/merchantReference",
                    "/amount/value",
                    "/amount/currency",
                    "/eventCode",
                    "/success",
                ] {
                    let field = match item.pointer(pointer) {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Null) | None => String::new(),
                        Some(other) => other.to_string(),
                    };
                    content.push(field);
                }
                let signature = item.pointer("/additionalData/hmacSignature")?.as_str()?;
                signatures.push(signature.to_owned());
            }
            Some((
                format!("{content:?}").into_bytes(),
                format!("{signatures:?}").into_bytes(),
            ))
        }
        "twilio" => {
            let mut content = raw.path.clone().into_bytes();
            content.push(b'\n');
            if raw.path.contains("bodySHA256=") {
                content.extend(&raw.body);
            } else {
                // What Twilio signs: names and values run together, so
                // moving a boundary (`a=bc` to `ab=c`) keeps the meaning.
                let mut pairs = form_pairs(&raw.body)?;
                pairs.sort();
                pairs.dedup();
                for (name, value) in pairs {
                    content.extend(name.into_bytes());
                    content.extend(value.into_bytes());
                }
            }
            content.extend(
                raw.header("x-twilio-webhooks-signature-settings")
                    .unwrap_or_default(),
            );
            Some((content, raw.header("x-twilio-signature")?))
        }
        other => panic!("no meaning for {other}"),
    }
}

/// A certificate serial as the number it spells (hex: case and leading
/// zeros aside), any other key id as it is.
fn serial_number(id: &[u8]) -> Vec<u8> {
    if !id.is_empty() && id.iter().all(u8::is_ascii_hexdigit) {
        let start = id.iter().position(|b| *b != b'0').unwrap_or(id.len() - 1);
        id[start..].to_ascii_uppercase()
    } else {
        id.to_vec()
    }
}

/// One-byte edits.
#[derive(Debug, Clone, Copy)]
enum Edit {
    Flip(u8),
    Insert(u8),
    Delete,
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (1..=255u8).prop_map(Edit::Flip),
        any::<u8>().prop_map(Edit::Insert),
        Just(Edit::Delete),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: Edit, at: prop::sample::Index) {
    match edit {
        Edit::Insert(byte) => bytes.insert(at.index(bytes.len() + 1), byte),
        Edit::Flip(mask) if !bytes.is_empty() => {
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
        }
        Edit::Delete if !bytes.is_empty() => {
            bytes.remove(at.index(bytes.len()));
        }
        _ => {}
    }
}

/// The headers of `scheme` that its signature depends on (none: the
/// signature and everything it covers are in the body).
fn signed_headers(scheme: &str) -> &'static [&'static str] {
    match scheme {
        "wechatpay-v3" => &[
            "wechatpay-signature",
            "wechatpay-serial",
            "wechatpay-timestamp",
            "wechatpay-nonce",
        ],
        "twilio" => &["x-twilio-signature"],
        _ => &[],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Fuzz: arbitrary bodies and arbitrary values in every header the
    /// payment schemes read never panic and never verify.
    #[test]
    fn fuzz_payment_parsers(
        scheme in prop::sample::select(SCHEMES.to_vec()),
        vector in prop::sample::Index::arbitrary(),
        body in body_strategy(),
        headers in headers_strategy(),
    ) {
        let paths: Vec<&PaymentVector> =
            valid_vectors().iter().filter(|v| v.scheme == scheme).collect();
        let raw = Raw { path: vector.get(&paths).path.clone(), headers, body };
        let result = verify(scheme, &raw, NOW_S);
        prop_assert!(result.is_err(), "{scheme} verified {raw:?}: {result:?}");
    }

    /// Fuzz: a one-byte edit of a valid vector, in its body or in a header
    /// its signature depends on, verifies only if the request still means
    /// the same (signed content, decoded signature and signed id).
    #[test]
    fn fuzz_payment_vector_mutations(
        vector in prop::sample::Index::arbitrary(),
        in_header in any::<bool>(),
        header in prop::sample::Index::arbitrary(),
        edit in edit_strategy(),
        at in prop::sample::Index::arbitrary(),
    ) {
        let vector = vector.get(valid_vectors());
        let scheme = vector.scheme.as_str();
        let now = vector.now.unwrap_or(NOW_S);
        let original = Raw::of(vector);
        let expected = verify(scheme, &original, now);
        prop_assert!(expected.is_ok(), "{}: {expected:?}", vector.name);

        let mut mutated = original.clone();
        let names = signed_headers(scheme);
        let target = if in_header && !names.is_empty() {
            let name = *header.get(names);
            let slot = mutated.headers.iter_mut().find(|(k, _)| k == name).unwrap();
            &mut slot.1
        } else {
            &mut mutated.body
        };
        apply(target, edit, at);

        if let Ok(authenticity) = verify(scheme, &mutated, now) {
            let before = meaning(scheme, &original).expect("the vector reads");
            prop_assert_eq!(
                meaning(scheme, &mutated),
                Some(before),
                "{} verified with another meaning: {:?}",
                &vector.name,
                &mutated
            );
            prop_assert_eq!(
                authenticity.signed_id(&mutated.body),
                expected.unwrap().signed_id(&original.body),
                "{}",
                &vector.name
            );
        }
    }

    /// `alipay::sign_content` over sorted pairs: exactly the pairs other
    /// than `sign` and `sign_type`, as `k=v` joined by `&`, in the given
    /// order; sorting first makes it independent of the input order.
    #[test]
    fn alipay_sign_content_drops_sign_and_ignores_order(
        pairs in prop::collection::btree_map(
            prop_oneof![
                Just("sign".to_owned()),
                Just("sign_type".to_owned()),
                "[a-z_]{1,10}",
            ],
            "[^&=]{0,10}",
            0..12,
        ),
        order in any::<u64>(),
    ) {
        let pairs: Vec<(String, String)> = pairs.into_iter().collect();
        let sorted: Vec<&(String, String)> = pairs.iter().collect();
        let content = alipay::sign_content(&sorted);
        let kept: Vec<String> = pairs
            .iter()
            .filter(|(k, _)| k != "sign" && k != "sign_type")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        prop_assert_eq!(&content, &kept.join("&"));
        if !content.is_empty() {
            for piece in content.split('&') {
                prop_assert!(!piece.starts_with("sign=") && !piece.starts_with("sign_type="));
            }
        }

        let mut shuffled = pairs.clone();
        shuffle(&mut shuffled, order);
        let mut resorted: Vec<&(String, String)> = shuffled.iter().collect();
        resorted.sort_by(|a, b| a.0.cmp(&b.0));
        prop_assert_eq!(alipay::sign_content(&resorted), content);
    }

    /// `twilio::sorted_params`: independent of the parameters' order and of
    /// a pair sent twice, and exactly each distinct pair's name and value.
    #[test]
    fn twilio_sorted_params_ignore_order_and_repeats(
        pairs in prop::collection::vec(("[A-Za-z]{0,4}", "\\PC{0,4}"), 0..10),
        repeat in prop::sample::Index::arbitrary(),
        order in any::<u64>(),
    ) {
        let pairs: Vec<(String, String)> = pairs;
        let params = twilio::sorted_params(&pairs);
        let mut distinct = pairs.clone();
        distinct.sort();
        distinct.dedup();
        let length: usize = distinct.iter().map(|(k, v)| k.len() + v.len()).sum();
        prop_assert_eq!(params.len(), length);

        let mut shuffled = pairs.clone();
        if !pairs.is_empty() {
            shuffled.push(repeat.get(&pairs).clone());
        }
        shuffle(&mut shuffled, order);
        prop_assert_eq!(twilio::sorted_params(&shuffled), params);
    }

    /// `twilio::url_variants`: the input first, at most two entries, a
    /// second one only for a URL with a scheme, differing from the input
    /// only in the authority's port.
    #[test]
    fn twilio_url_variants_start_with_the_url(
        url in prop_oneof![
            "(https?://)?[a-z.]{0,12}(:[0-9]{0,5})?(/[a-z]{0,4}){0,2}(\\?[a-z=&:/]{0,8})?",
            "[ -~]{0,40}",
        ],
    ) {
        let variants = twilio::url_variants(&url);
        prop_assert!(!variants.is_empty() && variants.len() <= 2, "{variants:?}");
        prop_assert_eq!(&variants[0], &url);
        prop_assert_eq!(variants.len() == 2, url.contains("://"));
        if let Some(other) = variants.get(1) {
            prop_assert_ne!(other, &url);
            let scheme = url.split_once("://").unwrap().0;
            let prefix = format!("{scheme}://");
            prop_assert!(other.starts_with(&prefix));
            let tail = |u: &str| {
                let rest = u.split_once("://").unwrap().1;
                rest[rest.find(['/', '?']).unwrap_or(rest.len())..].to_owned()
            };
            prop_assert_eq!(tail(other), tail(&url));
        }
    }
}

/// A deterministic shuffle of `items` by `seed` (Fisher–Yates, xorshift).
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut seed = seed | 1;
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let j = usize::try_from(seed % (i as u64 + 1)).unwrap();
        items.swap(i, j);
    }
}
