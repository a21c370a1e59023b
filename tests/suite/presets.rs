//! Signature presets: known-answer vectors from the senders' official
//! libraries (tests/vectors/), rotation, window edges, end to end through
//! the proxy, and a property-based fuzz pass over every header parser.
//!
//! Longer fuzzing: `PROPTEST_CASES=200000 cargo test --release --test suite presets::fuzz`
//! (bounded by the case count; about a minute here).

use crate::support::*;
use bytes::Bytes;
use idemgate::config::{Config, Scheme};
use idemgate::error::Rejection;
use idemgate::extract::Inbound;
use idemgate::signature::{self, Authenticity};
use proptest::prelude::*;

const PRESETS: [&str; 5] = ["standard-webhooks", "stripe", "github", "slack", "shopify"];

fn scheme_of(name: &str, secrets: &[&str]) -> Scheme {
    let text = preset_config_text(
        "kind = \"embedded\"\npath = \"/tmp/unused.redb\"",
        "http://127.0.0.1:1",
        name,
        secrets,
    );
    Config::parse(&text)
        .expect("preset config")
        .routes
        .remove(0)
        .scheme
}

fn inbound(headers: &[(String, String)], body: &[u8]) -> Inbound {
    let mut request = http::Request::post("/hook");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let (parts, ()) = request.body(()).unwrap().into_parts();
    Inbound::new(parts, Bytes::copy_from_slice(body))
}

fn check(
    scheme: &Scheme,
    headers: &[(String, String)],
    body: &[u8],
    now_s: u64,
) -> Result<Authenticity, Rejection> {
    signature::verify(scheme, &inbound(headers, body), now_s * 1000)
}

/// Changes the last character of a text to another one of the same kind.
fn nudge(text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let last = chars.last_mut().expect("non-empty");
    *last = match *last {
        '0' => '1',
        'a' => 'b',
        '=' => {
            let n = chars.len();
            chars[n - 2] = if chars[n - 2] == 'A' { 'B' } else { 'A' };
            return chars.into_iter().collect();
        }
        _ => '0',
    };
    chars.into_iter().collect()
}

/// Nudges every signature in a header that may carry several.
fn nudge_every_signature(scheme: &str, value: &str) -> String {
    match scheme {
        "standard-webhooks" => value.split(' ').map(nudge).collect::<Vec<_>>().join(" "),
        "stripe" => value
            .split(',')
            .map(|item| {
                if item.starts_with("v1=") {
                    nudge(item)
                } else {
                    item.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(","),
        _ => nudge(value),
    }
}

struct Vector {
    name: String,
    scheme: String,
    secrets: Vec<String>,
    body: Vec<u8>,
    timestamp: Option<u64>,
    id: Option<String>,
    headers: Headers,
}

fn vectors() -> Vec<Vector> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/vectors.json"
    ))
    .unwrap();
    let all: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    all.into_iter()
        .filter_map(|v| {
            let scheme = match v["scheme"].as_str()? {
                "svix" => "standard-webhooks",
                s if PRESETS.contains(&s) => s,
                _ => return None,
            };
            let mut secrets = vec![v["secret"].as_str()?.to_owned()];
            if let Some(also) = v["extra"]["also_secrets"].as_array() {
                secrets.extend(also.iter().filter_map(|s| s.as_str().map(str::to_owned)));
            }
            Some(Vector {
                name: v["name"].as_str()?.to_owned(),
                scheme: scheme.to_owned(),
                secrets,
                body: v["body"].as_str()?.as_bytes().to_vec(),
                timestamp: v["timestamp"].as_u64(),
                id: v["id"].as_str().map(str::to_owned),
                headers: v["expect_headers"]
                    .as_object()?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect(),
            })
        })
        .collect()
}

fn signature_header(scheme: &str, headers: &Headers) -> String {
    let names: &[&str] = match scheme {
        "standard-webhooks" => &["webhook-signature", "svix-signature"],
        "stripe" => &["stripe-signature"],
        "github" => &["x-hub-signature-256"],
        "slack" => &["x-slack-signature"],
        _ => &["x-shopify-hmac-sha256"],
    };
    headers
        .iter()
        .find(|(k, _)| names.contains(&k.to_ascii_lowercase().as_str()))
        .map(|(k, _)| k.clone())
        .expect("signature header")
}

fn replace(headers: &Headers, name: &str, value: impl Into<String>) -> Headers {
    let value = value.into();
    headers
        .iter()
        .map(|(k, v)| {
            if k.eq_ignore_ascii_case(name) {
                (k.clone(), value.clone())
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect()
}

#[test]
fn every_known_answer_vector_verifies_and_any_one_byte_change_fails() {
    let vectors = vectors();
    let covered: std::collections::BTreeSet<&str> =
        vectors.iter().map(|v| v.scheme.as_str()).collect();
    assert_eq!(
        covered.len(),
        PRESETS.len(),
        "vectors for every preset: {covered:?}"
    );
    for v in &vectors {
        let secrets: Vec<&str> = v.secrets.iter().map(String::as_str).collect();
        let scheme = scheme_of(&v.scheme, &secrets);
        let now = v.timestamp.unwrap_or(1_700_000_000);
        let verified = check(&scheme, &v.headers, &v.body, now);
        assert!(verified.is_ok(), "{}: {verified:?}", v.name);
        if v.scheme == "standard-webhooks" {
            assert_eq!(
                verified.unwrap().signed_id(&v.body).as_deref(),
                v.id.as_deref().map(str::as_bytes),
                "{}",
                v.name
            );
        }

        let mut body = v.body.clone();
        *body.last_mut().unwrap() ^= 0x01;
        assert_eq!(
            check(&scheme, &v.headers, &body, now),
            Err(Rejection::SignatureInvalid),
            "{}: body",
            v.name
        );

        let sig_name = signature_header(&v.scheme, &v.headers);
        let sig_value = v
            .headers
            .iter()
            .find(|(k, _)| *k == sig_name)
            .unwrap()
            .1
            .clone();
        let forged = replace(
            &v.headers,
            &sig_name,
            nudge_every_signature(&v.scheme, &sig_value),
        );
        assert_eq!(
            check(&scheme, &forged, &v.body, now),
            Err(Rejection::SignatureInvalid),
            "{}: signature",
            v.name
        );

        if let Some(ts) = v
            .timestamp
            .filter(|_| !matches!(v.scheme.as_str(), "github" | "shopify"))
        {
            let later = (ts + 1).to_string();
            let moved = match v.scheme.as_str() {
                "stripe" => replace(
                    &v.headers,
                    &sig_name,
                    sig_value.replacen(&ts.to_string(), &later, 1),
                ),
                "slack" => replace(&v.headers, "x-slack-request-timestamp", later),
                _ => {
                    let name = if sig_name.starts_with("svix") {
                        "svix-timestamp"
                    } else {
                        "webhook-timestamp"
                    };
                    replace(&v.headers, name, later)
                }
            };
            assert_eq!(
                check(&scheme, &moved, &v.body, ts + 1),
                Err(Rejection::SignatureInvalid),
                "{}: timestamp",
                v.name
            );
        }
        if v.scheme == "standard-webhooks" {
            let name = if sig_name.starts_with("svix") {
                "svix-id"
            } else {
                "webhook-id"
            };
            let other = replace(&v.headers, name, format!("{}x", v.id.as_deref().unwrap()));
            assert_eq!(
                check(&scheme, &other, &v.body, now),
                Err(Rejection::SignatureInvalid),
                "{}: id",
                v.name
            );
        }
    }
}

fn new_and_old(scheme: &str) -> [&'static str; 3] {
    if scheme == "standard-webhooks" {
        // base64 of "new-secret-key-0123456789", "old-…", "random-…"
        [
            "whsec_bmV3LXNlY3JldC1rZXktMDEyMzQ1Njc4OQ==",
            "whsec_b2xkLXNlY3JldC1rZXktMDEyMzQ1Njc4OQ==",
            "whsec_cmFuZG9tLWtleS0wMTIzNDU2Nzg5MDEyMw==",
        ]
    } else {
        [
            "new-secret-0123456789",
            "old-secret-0123456789",
            "random-secret-0123456789",
        ]
    }
}

#[test]
fn rotation_accepts_old_and_new_and_names_which() {
    let now = now_secs();
    for preset in PRESETS {
        let [new, old, random] = new_and_old(preset);
        let scheme = scheme_of(preset, &[new, old]);
        let body = preset_body(preset, "evt_1");
        for (secret, index) in [(new, 0), (old, 1)] {
            let headers = preset_headers(preset, secret, now, "evt_1", &body);
            let got = check(&scheme, &headers, body.as_bytes(), now);
            assert_eq!(
                got.map(|a| a.secret_index),
                Ok(Some(index)),
                "{preset} secret {index}"
            );
        }
        let headers = preset_headers(preset, random, now, "evt_1", &body);
        assert_eq!(
            check(&scheme, &headers, body.as_bytes(), now),
            Err(Rejection::SignatureInvalid),
            "{preset}"
        );
    }
}

#[test]
fn window_edges_per_preset() {
    let now = now_secs();
    for preset in ["standard-webhooks", "stripe", "slack"] {
        let [secret, _, _] = new_and_old(preset);
        let scheme = scheme_of(preset, &[secret]);
        let body = preset_body(preset, "evt_w");
        let at = |ts: u64| {
            check(
                &scheme,
                &preset_headers(preset, secret, ts, "evt_w", &body),
                body.as_bytes(),
                now,
            )
        };
        assert!(at(now - 300).is_ok(), "{preset}: exactly 300 s old");
        assert_eq!(
            at(now - 301),
            Err(Rejection::TimestampOutOfWindow),
            "{preset}: 301 s old"
        );
        assert!(at(now + 300).is_ok(), "{preset}: exactly 300 s ahead");
        if preset == "stripe" {
            // stripe-python and stripe-node check the past side only.
            assert!(at(now + 301).is_ok(), "stripe accepts future timestamps");
        } else {
            assert_eq!(
                at(now + 301),
                Err(Rejection::TimestampOutOfWindow),
                "{preset}: 301 s ahead"
            );
        }
    }
}

#[test]
fn svix_header_names_are_accepted_and_keyed_by_their_id() {
    let now = now_secs();
    let [secret, _, _] = new_and_old("standard-webhooks");
    let scheme = scheme_of("standard-webhooks", &[secret]);
    let body = preset_body("svix", "m");
    let headers = preset_headers("svix", secret, now, "msg_svix_1", &body);
    let got = check(&scheme, &headers, body.as_bytes(), now).unwrap();
    assert_eq!(
        got.signed_id(body.as_bytes()).as_deref(),
        Some(&b"msg_svix_1"[..])
    );
}

#[test]
fn missing_empty_duplicated_and_garbage_headers_are_401() {
    let now = now_secs();
    for preset in PRESETS {
        let [secret, _, _] = new_and_old(preset);
        let scheme = scheme_of(preset, &[secret]);
        let body = preset_body(preset, "evt_g");
        let good = preset_headers(preset, secret, now, "evt_g", &body);
        let sig_name = signature_header(preset, &good);
        let without: Headers = good
            .iter()
            .filter(|(k, _)| *k != sig_name)
            .cloned()
            .collect();
        assert_eq!(
            check(&scheme, &without, body.as_bytes(), now),
            Err(Rejection::SignatureMissing),
            "{preset}"
        );
        let empty = replace(&good, &sig_name, String::new());
        assert_eq!(
            check(&scheme, &empty, body.as_bytes(), now),
            Err(Rejection::SignatureMissing),
            "{preset}"
        );
        let mut twice = good.clone();
        twice.push(good.iter().find(|(k, _)| *k == sig_name).unwrap().clone());
        assert_eq!(
            check(&scheme, &twice, body.as_bytes(), now),
            Err(Rejection::SignatureInvalid),
            "{preset}: duplicated"
        );
        let huge = replace(&good, &sig_name, "A".repeat(10_000));
        assert_eq!(
            check(&scheme, &huge, body.as_bytes(), now),
            Err(Rejection::SignatureInvalid),
            "{preset}: oversized"
        );
        let garbage = replace(&good, &sig_name, "v1=zz,,t=,sha256=%%%");
        assert!(
            check(&scheme, &garbage, body.as_bytes(), now).is_err(),
            "{preset}: garbage"
        );
        // Header names are case-insensitive.
        let shouted: Headers = good
            .iter()
            .map(|(k, v)| (k.to_uppercase(), v.clone()))
            .collect();
        assert!(
            check(&scheme, &shouted, body.as_bytes(), now).is_ok(),
            "{preset}: upper-case names"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_preset_end_to_end_through_the_proxy() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let mut expected_calls = 0;
    for preset in PRESETS {
        let [secret, _, random] = new_and_old(preset);
        let gate = Gate::start(&preset_config_text(
            &redis_store(&redis),
            &upstream.url(),
            preset,
            &[secret],
        ))
        .await;
        let url = gate.url("/hook");
        let id = format!("evt_{preset}");
        let body = preset_body(preset, &id);
        let now = now_secs();

        let first = send(
            "POST",
            &url,
            &preset_headers(preset, secret, now, &id, &body),
            body.clone(),
        )
        .await;
        assert_eq!(
            (first.status, first.replayed()),
            (200, Some("false")),
            "{preset}: {first:?}"
        );
        expected_calls += 1;
        // The platform retries with a new timestamp and a new signature.
        let retry = send(
            "POST",
            &url,
            &preset_headers(preset, secret, now + 1, &id, &body),
            body.clone(),
        )
        .await;
        assert_eq!(
            (retry.status, retry.replayed()),
            (200, Some("true")),
            "{preset}: {retry:?}"
        );
        assert_eq!(retry.body, first.body);
        assert_eq!(upstream.calls(), expected_calls, "{preset}: executed once");

        let store = redis.watch_data();
        let forged = send(
            "POST",
            &url,
            &preset_headers(preset, random, now, &id, &body),
            body.clone(),
        )
        .await;
        assert_eq!(forged.status, 401, "{preset}");
        assert_eq!(
            forged.reason().as_deref(),
            Some("signature_invalid"),
            "{preset}"
        );
        assert_eq!(
            store.commands(),
            Vec::<String>::new(),
            "{preset}: no store command for a forgery"
        );
        assert_eq!(upstream.calls(), expected_calls);
        gate.stop().await;
    }
}

fn header_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,120}",
        "(t=[0-9]{0,12}|v1=[0-9a-f]{0,64}|v0=[a-z]{0,8}|,| ){0,8}",
        "(v1,[A-Za-z0-9+/=]{0,48}| |v1a,x){0,5}",
        "(sha256=|v0=)[0-9a-fA-F]{0,70}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
    ))]

    /// Fuzz: arbitrary values in every header any preset reads never panic
    /// and never verify.
    #[test]
    fn fuzz_preset_header_parsers(
        preset in prop::sample::select(PRESETS.to_vec()),
        signature in header_strategy(),
        timestamp in "[ -~]{0,24}",
        id in "[ -~]{0,40}",
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let [secret, _, _] = new_and_old(preset);
        let scheme = scheme_of(preset, &[secret]);
        let names = [
            "webhook-signature", "svix-signature", "stripe-signature", "x-hub-signature-256",
            "x-slack-signature", "x-shopify-hmac-sha256",
        ];
        let mut headers: Headers = names.iter().map(|n| (n.to_string(), signature.clone())).collect();
        for name in ["webhook-timestamp", "svix-timestamp", "x-slack-request-timestamp"] {
            headers.push((name.into(), timestamp.clone()));
        }
        for name in ["webhook-id", "svix-id", "x-shopify-topic", "x-shopify-shop-domain", "x-shopify-api-version", "x-shopify-webhook-id"] {
            headers.push((name.into(), id.clone()));
        }
        let headers: Headers = headers
            .into_iter()
            .filter(|(_, v)| http::HeaderValue::from_str(v).is_ok())
            .collect();
        prop_assert!(check(&scheme, &headers, &body, 1_700_000_000).is_err());
    }
}
