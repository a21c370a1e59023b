//! Idempotency-key extraction and request fingerprinting (pipeline stage 4).
//!
//! The input is a request in the text format of `src/lib.rs`. It is passed
//! through `pipeline::verify::verify` (scheme "none", so it always
//! verifies) and `pipeline::identify::identify` under each of the routes
//! below: composite keys from JSON pointers, headers (plain or RFC 8941
//! sf-string), form fields and the query; `fingerprint_ignore` over JSON
//! (canonical JSON with pointers removed, including `~0`/`~1` escapes and
//! array indexes), over form bodies (sorted, re-encoded pairs) and over
//! XML bodies (leaves sorted by path, length-prefixed); and a
//! route without a key, whose fingerprint is the key. Every header value
//! and the raw body also go through `identify::parse_sf_string`.
//!
//! Properties checked besides "never panics":
//! * the store key is `idemgate:<route>:<64 lowercase hex>`, and without
//!   key parts the key hash is the fingerprint;
//! * identify is deterministic (same request twice, same identity);
//! * `parse_sf_string` returns printable ASCII only, and quoting its result
//!   again parses back to the same content.

#![no_main]

use std::sync::OnceLock;

use idemgate::config::Config;
use idemgate::path::canonical_path;
use idemgate::pipeline::admit::identify::{identify, parse_sf_string};
use idemgate::pipeline::admit::route::Canonical;
use idemgate::pipeline::admit::verify::verify;
use idemgate_fuzz::request;
use libfuzzer_sys::fuzz_target;

/// Every route is scheme "none"; what differs is its idempotency table.
const ROUTES: &[idemgate_fuzz::Route] = &[
    (
        "json-key",
        "/json",
        "none",
        &[],
        r#"[route.idempotency]
key = ["json:/a", "header:Idempotency-Key", "form:b"]
require_key = false
fingerprint = ["method", "path", "query", "header:x-a", "body"]
fingerprint_ignore = ["json:/ts", "json:/meta/nonce", "json:/items/0", "json:/a~1b/~0c"]"#,
    ),
    (
        "json-required",
        "/json-required",
        "none",
        &[],
        r#"[route.idempotency]
key = ["json:/id", "header:Idempotency-Key"]
fingerprint_ignore = ["json:/notify_time", "json:/"]"#,
    ),
    (
        "form-key",
        "/form",
        "none",
        &[],
        r#"[route.idempotency]
key = ["form:out_trade_no", "query:k"]
require_key = false
fingerprint_ignore = ["form:sign", "form:notify_time"]"#,
    ),
    (
        "header-key",
        "/header",
        "none",
        &[],
        r#"[route.idempotency]
key = ["header:Idempotency-Key"]
fingerprint = ["method", "path", "body", "header:idempotency-key"]"#,
    ),
    (
        "xml-key",
        "/xml",
        "none",
        &[],
        r#"[route.idempotency]
key = ["xml:/xml/out_trade_no"]
require_key = false
fingerprint_ignore = ["xml:/xml/nonce_str", "xml:/xml/sign"]"#,
    ),
    (
        "no-key",
        "/no-key",
        "none",
        &[],
        r#"[route.idempotency]
fingerprint = ["method", "path", "query", "body"]
fingerprint_ignore = ["json:/ts"]"#,
    ),
];

const PREFIX: &str = "idemgate";

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| idemgate_fuzz::config(&idemgate_fuzz::routes(ROUTES)))
}

fn check_sf_string(raw: &[u8]) {
    let Some(content) = parse_sf_string(raw) else {
        return;
    };
    assert!(content.iter().all(|b| (0x20..=0x7e).contains(b)));
    let mut quoted = vec![b'"'];
    for &b in &content {
        if b == b'"' || b == b'\\' {
            quoted.push(b'\\');
        }
        quoted.push(b);
    }
    quoted.push(b'"');
    assert_eq!(parse_sf_string(&quoted), Some(content));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fuzz_target!(|data: &[u8]| {
    let config = config();
    let req = request(data);
    for (_, value) in &req.header_values {
        check_sf_string(value);
    }
    check_sf_string(&req.inbound.body);

    for route in &config.routes {
        // verify takes the request by value: decode a fresh one per route.
        let inbound = request(data).inbound;
        let verified = match verify(inbound, route, req.now_ms) {
            Ok(verified) => verified,
            Err(unverified) => panic!("scheme none refused: {:?}", unverified.rejection),
        };
        let parts = &verified.inbound().parts;
        let path = parts.uri.path();
        let canonical = Canonical {
            method: parts.method.clone(),
            path: canonical_path(path).unwrap_or_else(|| path.to_owned()),
        };
        let first = identify(&verified, route, &canonical, PREFIX);
        if idemgate_fuzz::debug() {
            eprintln!("{}: {first:?}", route.name);
        }
        let again = identify(&verified, route, &canonical, PREFIX);
        match (&first, &again) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.key, b.key);
                assert_eq!(a.fingerprint, b.fingerprint);
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("identify is not deterministic: {first:?} vs {again:?}"),
        }
        let Ok(identity) = first else { continue };
        let expected = format!("{PREFIX}:{}:", route.name);
        let key = identity.key.as_str();
        assert!(key.starts_with(&expected), "{key}");
        assert_eq!(&key[expected.len()..], identity.key_hash);
        assert_eq!(identity.key_hash.len(), 64);
        assert!(
            identity
                .key_hash
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        if route.idempotency.key.is_none() {
            assert_eq!(identity.key_hash, hex(&identity.fingerprint.0));
        }
    }
});
