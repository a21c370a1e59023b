//! Criterion micro-benchmarks of idemgate's pure per-request stages, with no
//! network, store or runtime involved:
//!
//! * `verify/<scheme>` — signature verification of a 1 KiB body under every
//!   preset (and the generic `hmac` scheme), one configured secret, through
//!   `idemgate::signature::verify` with the scheme built by `Config::parse`.
//! * `verify_payment/<scheme>` — the payment presets on their first SDK
//!   vector (`tests/vectors/payments.json`), a fresh request each
//!   iteration, so the form, XML or JSON parse is measured too (the RSA
//!   ones verify SHA256withRSA with a 2048-bit key).
//! * `identify/<body>` — `pipeline::verify::verify` under `scheme = "none"`
//!   followed by `pipeline::identify::identify` (key extraction and the
//!   request fingerprint) for a JSON and a form body, with the raw-bytes body
//!   fingerprint and with `fingerprint_ignore` (canonical form).
//! * `record/*` — `Record::encode` / `Record::decode` of an in-flight claim
//!   and of a completed record holding a small and a 1 KiB answer.
//! * `hot_keys/*` — `RouteHotKeys::observe` with `k = 10` (a table of 40)
//!   already full: a key it tracks (`hit`) and a key it does not, which
//!   evicts the least one (`miss`). Prints the table's bytes per route.
//!
//! Run: `cargo bench --bench stages` (about a minute of measurement; add
//! `-- verify` to run one group). Short measurement times keep it cheap on a
//! shared 2-core machine: compare stages with each other, not runs. The
//! `bench` profile inherits the release profile's full LTO, so the first
//! build takes minutes; `CARGO_PROFILE_BENCH_LTO=false
//! CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 cargo bench --bench stages` builds
//! much faster, at the price of numbers a little off the shipped binary.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, Criterion};
use http::Request;
use idemgate::config::{Algorithm, Config, Route};
use idemgate::extract::Inbound;
use idemgate::pipeline::admit::{identify, verify};
use idemgate::record::{Fingerprint, OwnerToken, Record, RecordState, StoredResponse};

const SECRET: &str = "bench-secret-0123456789abcdef";
/// `whsec_` + base64 of 24 bytes, for standard-webhooks.
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const TIMESTAMP_S: u64 = 1_700_000_000;
const NOW_MS: u64 = TIMESTAMP_S * 1000 + 1_500;
const DELIVERY_ID: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

/// A JSON body of exactly `len` bytes (padded in a string field) with an
/// `id`, as most presets' default keys want.
fn json_body(len: usize) -> String {
    let head = format!(
        r#"{{"id":"evt_{DELIVERY_ID}","event_id":"Ev{DELIVERY_ID}","type":"payment_intent.succeeded","created":{TIMESTAMP_S},"paymentNo":"P-1001","status":"PAID","amount":"10.00","notify_time":"2025-01-01 00:00:00","data":""#
    );
    let tail = r#""}"#;
    let pad = len.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// A form body of about `len` bytes with an `id` field.
fn form_body(len: usize) -> String {
    let head = format!(
        "id={DELIVERY_ID}&paymentNo=P-1001&status=PAID&amount=10.00&notify_time=2025-01-01+00%3A00%3A00&data="
    );
    let pad = len.saturating_sub(head.len());
    format!("{head}{}", "x".repeat(pad))
}

/// Config text with one route on `/hook`, whose `[route.signature]` and
/// optional `[route.idempotency]` tables are given.
fn config_text(signature: &str, idempotency: &str) -> String {
    format!(
        r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "redis"
url = "redis://127.0.0.1:6379/0"
durability = "memory"

[upstream]
url = "http://127.0.0.1:3000"

[[route]]
name = "hook"
path_prefix = "/hook"

[route.signature]
{signature}
{idempotency}
"#
    )
}

fn route(text: &str) -> Route {
    let config = Config::parse(text).unwrap_or_else(|e| panic!("bench config: {e:?}\n{text}"));
    config.routes.into_iter().next().expect("one route")
}

fn hex_mac(key: &[u8], parts: &[&[u8]]) -> String {
    hex::encode(idemgate::signature::mac(Algorithm::Sha256, key, parts))
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The request head a sender of `scheme` puts on `body`.
fn signed_parts(scheme: &str, body: &str) -> http::request::Parts {
    let ts = TIMESTAMP_S.to_string();
    let body_bytes = body.as_bytes();
    let headers: Vec<(&str, String)> = match scheme {
        "github" => vec![
            (
                "x-hub-signature-256",
                format!("sha256={}", hex_mac(SECRET.as_bytes(), &[body_bytes])),
            ),
            ("x-github-delivery", DELIVERY_ID.to_owned()),
            ("x-github-event", "push".to_owned()),
        ],
        "stripe" => vec![(
            "stripe-signature",
            format!(
                "t={ts},v1={}",
                hex_mac(SECRET.as_bytes(), &[ts.as_bytes(), b".", body_bytes])
            ),
        )],
        "slack" => vec![
            (
                "x-slack-signature",
                format!(
                    "v0={}",
                    hex_mac(
                        SECRET.as_bytes(),
                        &[b"v0:", ts.as_bytes(), b":", body_bytes]
                    )
                ),
            ),
            ("x-slack-request-timestamp", ts),
        ],
        "shopify" => vec![
            (
                "x-shopify-hmac-sha256",
                b64(&idemgate::signature::mac(
                    Algorithm::Sha256,
                    SECRET.as_bytes(),
                    &[body_bytes],
                )),
            ),
            ("x-shopify-webhook-id", DELIVERY_ID.to_owned()),
            ("x-shopify-topic", "orders/paid".to_owned()),
            ("x-shopify-shop-domain", "example.myshopify.com".to_owned()),
            ("x-shopify-api-version", "2025-07".to_owned()),
        ],
        "standard-webhooks" => {
            use base64::Engine;
            let key = base64::engine::general_purpose::STANDARD
                .decode(WHSEC.trim_start_matches("whsec_"))
                .expect("whsec_ secret");
            let signature = b64(&idemgate::signature::mac(
                Algorithm::Sha256,
                &key,
                &[
                    DELIVERY_ID.as_bytes(),
                    b".",
                    ts.as_bytes(),
                    b".",
                    body_bytes,
                ],
            ));
            vec![
                ("webhook-id", DELIVERY_ID.to_owned()),
                ("webhook-timestamp", ts),
                ("webhook-signature", format!("v1,{signature}")),
            ]
        }
        "hmac" => vec![
            ("x-timestamp", ts.clone()),
            (
                "x-signature",
                hex_mac(SECRET.as_bytes(), &[ts.as_bytes(), b".", body_bytes]),
            ),
        ],
        other => panic!("no signer for {other}"),
    };
    let mut builder = Request::post("/hook").header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    builder.body(()).expect("request").into_parts().0
}

fn signature_table(scheme: &str) -> String {
    match scheme {
        "standard-webhooks" => format!("scheme = \"{scheme}\"\nsecrets = [\"literal:{WHSEC}\"]"),
        "hmac" => format!(
            "scheme = \"hmac\"\nsecrets = [\"literal:{SECRET}\"]\nsignature = \"header:X-Signature\"\n\
             timestamp = \"header:X-Timestamp\"\nmessage = \"{{timestamp}}.{{body}}\""
        ),
        _ => format!("scheme = \"{scheme}\"\nsecrets = [\"literal:{SECRET}\"]"),
    }
}

fn bench_verify(c: &mut Criterion) {
    let body = json_body(1024);
    let mut group = c.benchmark_group("verify");
    for scheme in [
        "github",
        "stripe",
        "slack",
        "shopify",
        "standard-webhooks",
        "hmac",
    ] {
        let route = route(&config_text(&signature_table(scheme), ""));
        let inbound = Inbound::new(signed_parts(scheme, &body), Bytes::from(body.clone()));
        let verified = idemgate::signature::verify(&route.scheme, &inbound, NOW_MS);
        assert!(verified.is_ok(), "{scheme} does not verify: {verified:?}");
        group.bench_function(scheme, |b| {
            b.iter(|| idemgate::signature::verify(&route.scheme, black_box(&inbound), NOW_MS));
        });
    }
    group.finish();
}

/// The route and request of a payment scheme's first vector.
fn payment_case(scheme: &str) -> (Route, http::request::Parts, Bytes, u64) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/payments.json"
    ))
    .expect("payment vectors");
    let vectors: Vec<serde_json::Value> = serde_json::from_str(&text).expect("vectors JSON");
    let vector = vectors
        .iter()
        .find(|v| v["scheme"] == scheme)
        .expect("a vector per scheme");
    let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/keys");
    let signature = match (scheme, vector["key"].as_str()) {
        ("alipay", Some(key)) => {
            format!("scheme = \"alipay\"\npublic_keys = [\"file:{keys}/{key}.pub.pem\"]")
        }
        ("wechatpay-v3", Some(key)) => {
            format!("scheme = \"wechatpay-v3\"\npublic_keys = [\"file:{keys}/{key}.cert.pem\"]")
        }
        _ => {
            let url = if scheme == "twilio" {
                "\npublic_url = \"https://hooks.example.com\""
            } else {
                ""
            };
            let secret = vector["secret"].as_str().expect("a secret");
            format!("scheme = \"{scheme}\"\nsecrets = [\"literal:{secret}\"]{url}")
        }
    };
    let text =
        config_text(&signature, "").replace("path_prefix = \"/hook\"", "path_prefix = \"/\"");
    let mut builder = Request::post(vector["path"].as_str().expect("a path"));
    for (name, value) in vector["headers"].as_object().expect("headers") {
        builder = builder.header(name.as_str(), value.as_str().expect("a header value"));
    }
    let parts = builder.body(()).expect("request").into_parts().0;
    let body = Bytes::from(vector["body"].as_str().expect("a body").to_owned());
    let now_ms = vector["now"].as_u64().unwrap_or(TIMESTAMP_S) * 1000;
    (route(&text), parts, body, now_ms)
}

fn bench_verify_payment(c: &mut Criterion) {
    let mut group = c.benchmark_group("verify_payment");
    for scheme in ["alipay", "wechatpay-v2", "wechatpay-v3", "adyen", "twilio"] {
        let (route, parts, body, now_ms) = payment_case(scheme);
        let fresh = || Inbound::new(parts.clone(), body.clone());
        let verified = idemgate::signature::verify(&route.scheme, &fresh(), now_ms);
        assert!(verified.is_ok(), "{scheme} does not verify: {verified:?}");
        group.bench_function(scheme, |b| {
            b.iter_batched(
                fresh,
                |inbound| idemgate::signature::verify(&route.scheme, black_box(&inbound), now_ms),
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn bench_identify(c: &mut Criterion) {
    let json = json_body(1024);
    let form = form_body(1024);
    let cases = [
        (
            "json_key",
            r#"key = ["json:/id"]"#,
            &json,
            "application/json",
        ),
        (
            "json_key_ignore",
            "key = [\"json:/id\"]\nfingerprint_ignore = [\"json:/notify_time\"]",
            &json,
            "application/json",
        ),
        (
            "form_key",
            r#"key = ["form:id"]"#,
            &form,
            "application/x-www-form-urlencoded",
        ),
        (
            "form_key_ignore",
            "key = [\"form:id\"]\nfingerprint_ignore = [\"form:notify_time\"]",
            &form,
            "application/x-www-form-urlencoded",
        ),
        (
            "header_key",
            r#"key = ["header:X-GitHub-Delivery"]"#,
            &json,
            "application/json",
        ),
    ];
    let mut group = c.benchmark_group("identify");
    for (name, idempotency, body, content_type) in cases {
        let route = route(&config_text(
            "scheme = \"none\"",
            &format!("[route.idempotency]\n{idempotency}"),
        ));
        let parts = Request::post("/hook")
            .header("content-type", content_type)
            .header("x-github-delivery", DELIVERY_ID)
            .body(())
            .expect("request")
            .into_parts()
            .0;
        let body = Bytes::from(body.clone());
        let fresh = || Inbound::new(parts.clone(), body.clone());
        let canonical = idemgate::pipeline::admit::route::Canonical {
            method: http::Method::POST,
            path: "/hook".to_owned(),
        };
        let verified = verify::verify(fresh(), &route, NOW_MS).expect("scheme none");
        identify::identify(&verified, &route, &canonical, "idemgate").expect("identity");
        // A fresh Inbound per iteration (its JSON / form parse is cached),
        // built outside the timed part.
        group.bench_function(name, |b| {
            b.iter_batched(
                fresh,
                |inbound| {
                    let verified = verify::verify(inbound, &route, NOW_MS).expect("scheme none");
                    identify::identify(&verified, &route, &canonical, black_box("idemgate"))
                        .expect("identity")
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn completed(body_len: usize) -> Record {
    Record {
        owner: OwnerToken([7; 16]),
        fingerprint: Fingerprint([9; 32]),
        created_at_ms: NOW_MS,
        answered_at_ms: NOW_MS,
        trace: None,
        key: None,
        state: RecordState::Completed(StoredResponse {
            status: 200,
            headers: vec![
                (
                    Bytes::from_static(b"content-type"),
                    Bytes::from_static(b"text/plain"),
                ),
                (
                    Bytes::from_static(b"server"),
                    Bytes::from_static(b"nginx/1.22.1"),
                ),
                (
                    Bytes::from_static(b"date"),
                    Bytes::from_static(b"Sat, 29 Nov 2026 12:00:00 GMT"),
                ),
            ],
            body: idemgate::record::StoredBody::Kept(Bytes::from("s".repeat(body_len))),
        }),
    }
}

fn bench_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    let in_flight = Record::in_flight(OwnerToken([7; 16]), Fingerprint([9; 32]), None);
    let records = [
        ("in_flight", in_flight),
        ("completed_7B", completed(7)),
        ("completed_1KiB", completed(1024)),
    ];
    for (name, record) in &records {
        let encoded = record.encode().expect("encodes");
        assert_eq!(&Record::decode(&encoded).expect("decodes"), record);
        group.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| black_box(record).encode());
        });
        group.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| Record::decode(black_box(&encoded)));
        });
    }
    group.finish();
}

fn bench_hot_keys(c: &mut Criterion) {
    use idemgate::hot_keys::summary::ENTRY_BYTES;
    use idemgate::hot_keys::{CAPACITY_PER_K, RouteHotKeys, Sighting};
    use sha2::{Digest, Sha256};

    const K: usize = 10;
    let digest = |n: u64| -> [u8; 32] { Sha256::digest(n.to_le_bytes()).into() };
    let sighting = Sighting {
        outcome: "replayed",
        reason: None,
        duplicate: true,
    };
    let capacity = K * CAPACITY_PER_K;
    let table = RouteHotKeys::new("pay", capacity, Duration::from_secs(60));
    for n in 0..capacity as u64 {
        table.observe(&digest(n), sighting);
    }
    assert_eq!(table.tracked(), capacity);
    println!(
        "hot_keys: k = {K}, {capacity} entries x {ENTRY_BYTES} B + {} B = {} B per route",
        std::mem::size_of::<RouteHotKeys>(),
        capacity * ENTRY_BYTES + std::mem::size_of::<RouteHotKeys>()
    );
    let mut group = c.benchmark_group("hot_keys");
    let hit = digest(7);
    group.bench_function("observe_hit", |b| {
        b.iter(|| table.observe(black_box(&hit), sighting));
    });
    // Far more distinct keys than the table holds, so each one is gone
    // again before it comes round: every observation evicts.
    let misses: Vec<[u8; 32]> = (1_000..1_000 + 4_096).map(digest).collect();
    let mut next = misses.iter().cycle();
    group.bench_function("observe_miss", |b| {
        b.iter(|| {
            let key = next.next().expect("cycle never ends");
            table.observe(black_box(key), sighting);
        });
    });
    group.finish();
    assert_eq!(table.tracked(), capacity);
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

/// What `criterion_group!` + `criterion_main!` would generate, written out
/// so the crate's `missing_docs` lint has nothing undocumented to flag.
fn main() {
    let mut criterion = config().configure_from_args();
    bench_verify(&mut criterion);
    bench_verify_payment(&mut criterion);
    bench_identify(&mut criterion);
    bench_record(&mut criterion);
    bench_hot_keys(&mut criterion);
    criterion.final_summary();
}
