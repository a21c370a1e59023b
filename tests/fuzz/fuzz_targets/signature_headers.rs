//! Every signature scheme's header parsing and verification.
//!
//! The input is a request in the text format of `src/lib.rs` (request line
//! with the verification time, header lines, body). It is verified with
//! `idemgate::signature::verify` under one scheme of each preset
//! (standard-webhooks, which also reads `svix-*`; stripe; github; slack;
//! shopify) and under four generic `scheme = "hmac"` routes whose
//! signature, timestamp and message read headers, JSON pointers, form
//! fields and the query string. The schemes are built once from TOML with
//! `Config::parse`, with the secrets of the known-answer vectors in
//! `tests/vectors/vectors.json`, so the seed corpus made from those
//! vectors also reaches the verified path.
//!
//! The raw parsers are also called directly, on every header value and on
//! the raw body (which, unlike a header value, may hold any byte):
//! `stripe::parse_header`, `standard_webhooks::v1_signatures` and
//! `config::decode_whsec`, `hmac::decode_signature`, `signature::parse_timestamp`
//! and `signature::single_header`.
//!
//! Properties checked besides "never panics": a successful verification
//! names a secret that exists; standard-webhooks hands on the signed id
//! exactly as one of the id headers carries it; the parsers' outputs obey
//! their documented shapes.

#![no_main]

use std::sync::OnceLock;

use idemgate::config::{Config, Encoding};
use idemgate::signature::{self, hmac, standard_webhooks, stripe};
use idemgate_fuzz::request;
use libfuzzer_sys::fuzz_target;

/// One route per scheme, keyed by the vectors' secrets.
const ROUTES: &[idemgate_fuzz::Route] = &[
    (
        "standard-webhooks",
        "/standard-webhooks",
        "standard-webhooks",
        &[
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZC1zZWNyZXQ=",
        ],
        "",
    ),
    (
        "stripe",
        "/stripe",
        "stripe",
        &["whsec_test_secret", "whsec_new_secret", "whsec_old_secret"],
        "",
    ),
    (
        "github",
        "/github",
        "github",
        &["It's a Secret to Everybody", "gh_webhook_secret"],
        "",
    ),
    (
        "slack",
        "/slack",
        "slack",
        &["8f742231b10e8888abcd99yyyzzz85a5", "slack_signing_secret"],
        "",
    ),
    (
        "shopify",
        "/shopify",
        "shopify",
        &["shpss_test_client_secret"],
        "",
    ),
    (
        "hmac-header",
        "/hmac-header",
        "hmac",
        &["fuzz-secret-0123456789", "fuzz-old-0123456789"],
        r#"signature = "header:X-Signature"
prefix = "sha256="
encoding = "hex"
timestamp = "header:X-Timestamp"
message = "{timestamp}.{method} {path}.{body}""#,
    ),
    (
        "hmac-json",
        "/hmac-json",
        "hmac",
        &["fuzz-secret-0123456789"],
        r#"algorithm = "sha512"
signature = "json:/sign"
encoding = "base64"
timestamp = "json:/ts"
timestamp_unit = "ms"
tolerance = "1m"
message = "{json:/id}\n{json:/amount}\n{timestamp}\n{json:/data}{{x}}""#,
    ),
    (
        "hmac-form",
        "/hmac-form",
        "hmac",
        &["fuzz-secret-0123456789"],
        r#"signature = "form:sign"
encoding = "hex"
timestamp = "form:ts"
message = "{form:out_trade_no}&{form:total_fee}&{timestamp}&{query:t}""#,
    ),
    (
        "hmac-query",
        "/hmac-query",
        "hmac",
        &["fuzz-secret-0123456789"],
        r#"signature = "query:sig"
encoding = "base64"
message = "{method}{path}?a={query:a}""#,
    ),
];

/// The headers a standard-webhooks signed id comes from.
const ID_HEADERS: [&str; 2] = ["webhook-id", "svix-id"];

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| idemgate_fuzz::config(&idemgate_fuzz::routes(ROUTES)))
}

fn check_stripe_header(value: &[u8]) {
    let (timestamp, signatures) = stripe::parse_header(value);
    if let Some(t) = timestamp {
        assert_eq!(t, t.trim_ascii(), "t= value is trimmed");
    }
    for signature in signatures {
        assert!(!signature.is_empty() && signature == signature.trim_ascii());
        assert!(!signature.contains(&b','));
    }
}

fn check_v1_list(value: &[u8]) {
    for signature in standard_webhooks::v1_signatures(value) {
        assert!(!signature.is_empty() && !signature.contains(&b' '));
    }
}

fn check_raw_parsers(value: &[u8]) {
    check_stripe_header(value);
    check_v1_list(value);
    let _ = idemgate::config::decode_whsec(value);
    for encoding in [Encoding::Hex, Encoding::Base64] {
        if let Some(decoded) = hmac::decode_signature(value, encoding) {
            assert!(!decoded.is_empty());
        }
    }
    if let Ok(timestamp) = signature::parse_timestamp(value) {
        // Digits only: the value is the number the text spells.
        let digits = std::str::from_utf8(value).expect("digits are ASCII");
        assert_eq!(digits.parse::<u64>(), Ok(timestamp));
    }
}

fuzz_target!(|data: &[u8]| {
    let config = config();
    let req = request(data);
    let headers = &req.inbound.parts.headers;

    for (name, value) in &req.header_values {
        check_raw_parsers(value);
        if let Ok(Some(single)) = signature::single_header(headers, name.as_str()) {
            assert!(!single.is_empty() && single.len() <= signature::MAX_SIGNATURE_HEADER);
        }
    }
    check_raw_parsers(&req.inbound.body);

    for (route, authenticity) in idemgate_fuzz::verified(config, &req) {
        if route.name == "standard-webhooks" {
            let id = authenticity
                .signed_id(&req.inbound.body)
                .expect("standard-webhooks signs an id");
            assert!(
                ID_HEADERS.iter().any(|name| headers
                    .get(*name)
                    .is_some_and(|v| v.as_bytes().trim_ascii() == &id[..])),
                "signed id {id:?} is not an id header's value"
            );
        }
    }
});
