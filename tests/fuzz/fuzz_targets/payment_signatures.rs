//! The payment-channel presets' parsing and verification.
//!
//! The input is a request in the text format of `src/lib.rs` (request line
//! with the verification time, header lines, body). It is verified with
//! `idemgate::signature::verify` under one route per payment preset
//! (alipay with RSA1 allowed, wechatpay-v2, wechatpay-v3, adyen, twilio),
//! built once from TOML with `Config::parse`, with the secrets of the
//! vectors in `tests/vectors/payments.json` and the test public keys of
//! `tests/vectors/keys/` (read through `file:` paths made from this
//! crate's directory at compile time), so the seeds made from those
//! vectors reach the verified path.
//!
//! The canonicalisation helpers are also called directly on the body read
//! as a form: `alipay::sign_content`, `twilio::sorted_params`, and
//! `twilio::url_variants` on the URI.
//!
//! Properties checked besides "never panics": a successful verification
//! names a key that exists (index below `Scheme::secret_count`) and, for
//! adyen and twilio (whose signed id is built from fields always present),
//! carries a signed id; Alipay's signed content holds
//! no `sign`/`sign_type` pair; `sorted_params` ignores the order of the
//! pairs; `url_variants` starts with the URL and has at most two entries.

#![no_main]

use std::sync::OnceLock;

use idemgate::config::Config;
use idemgate::signature::{alipay, twilio};
use idemgate_fuzz::request;
use libfuzzer_sys::fuzz_target;

/// A test key file of `tests/vectors/keys/`, as a TOML `file:` string.
macro_rules! key {
    ($file:literal) => {
        concat!(
            "\"file:",
            env!("CARGO_MANIFEST_DIR"),
            "/../vectors/keys/",
            $file,
            "\""
        )
    };
}

/// One route per payment preset, keyed as the vectors need.
const ROUTES: &[idemgate_fuzz::Route] = &[
    (
        "alipay",
        "/hooks/alipay",
        "alipay",
        &[],
        concat!(
            "allow_rsa1 = true\npublic_keys = [",
            key!("alipay-1.pub.b64"),
            ", ",
            key!("alipay-2.pub.pem"),
            "]"
        ),
    ),
    (
        "wechatpay-v2",
        "/hooks/wechatpay/v2",
        "wechatpay-v2",
        &[
            "idemgateTestOnlyV2ApiKey20231114",
            "fuzz-old-api-key-0123456789abcde",
        ],
        "",
    ),
    (
        "wechatpay-v3",
        "/hooks/wechatpay/v3",
        "wechatpay-v3",
        &[],
        concat!(
            "public_keys = [",
            key!("wechatpay-1.cert.pem"),
            ", ",
            key!("wechatpay-2.cert.pem"),
            r#", { id = "PUB_KEY_ID_0112345678202501010000000000000000", key = "#,
            key!("wechatpay-pub.pub.pem"),
            " }]"
        ),
    ),
    (
        "adyen",
        "/hooks/adyen",
        "adyen",
        &[
            "F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186",
            "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF",
        ],
        "",
    ),
    (
        "twilio",
        "/hooks/twilio",
        "twilio",
        &["2613416aded31ff34d03ba7e6eb7f391", "fuzz-old-auth-token"],
        r#"public_url = "https://hooks.example.com""#,
    ),
];

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| idemgate_fuzz::config(&idemgate_fuzz::routes(ROUTES)))
}

fn check_helpers(body: &[u8], uri: &str) {
    let mut pairs: Vec<(String, String)> = form_urlencoded_pairs(body);
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let content = alipay::sign_content(&sorted);
    // The pairs hold no `&` (split on it), so the pieces are the pairs.
    for piece in content.split('&').filter(|p| !p.is_empty()) {
        assert!(!piece.starts_with("sign=") && !piece.starts_with("sign_type="));
    }

    let params = twilio::sorted_params(&pairs);
    pairs.reverse();
    assert_eq!(twilio::sorted_params(&pairs), params, "order matters");

    let url = format!("https://hooks.example.com{uri}");
    let variants = twilio::url_variants(&url);
    assert!(!variants.is_empty() && variants.len() <= 2);
    assert_eq!(variants[0], url);
}

/// The body read as a form, lossily (the helpers take decoded text).
fn form_urlencoded_pairs(body: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let config = config();
    let req = request(data);
    let uri = req
        .inbound
        .parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    check_helpers(&req.inbound.body, &uri);

    for (route, authenticity) in idemgate_fuzz::verified(config, &req) {
        if route.name == "adyen" || route.name == "twilio" {
            assert!(
                authenticity.signed_id(&req.inbound.body).is_some(),
                "{}",
                route.name
            );
        }
    }
});
