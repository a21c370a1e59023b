//! Signed coverage, differentially (docs/contract.md §4 rule 12): for every
//! preset and for `scheme = "hmac"` with representative templates, a
//! genuinely signed delivery is mutated where the scheme does not look
//! (headers, query, the path below the prefix, the method, whitespace and
//! encodings of signed values) and run through the real stages 1, 3 and 4
//! (`Router::select`, `verify`, `identify`). A mutant must be refused, or
//! land on the original's key; if its fingerprint moved, the route must
//! have a signed, required key (the store then answers 422
//! `fingerprint_mismatch`): never a second key, never a second execution.
//!
//! CI runs `PROPTEST_CASES` cases (default 256, a few seconds); a longer
//! run: `PROPTEST_CASES=20000 cargo test --test suite coverage::`.
//! `end_to_end` replays the reported cases against a real gate, Redis and
//! an upstream that counts executions.

use std::sync::LazyLock;

use base64::Engine;
use bytes::Bytes;
use idemgate::config::{Algorithm, Config};
use idemgate::extract::Inbound;
use idemgate::pipeline::admit::identify::identify;
use idemgate::pipeline::admit::route::{Router, Selection};
use idemgate::pipeline::admit::verify::verify;
use proptest::prelude::*;

use crate::support::*;

mod end_to_end;
mod mutate;

use mutate::{Mutation, mutation};

/// A secret long enough for any minimum-strength rule.
const LONG_SECRET: &str = "coverage-secret-0123456789abcdef";

/// One request as sent.
#[derive(Debug, Clone)]
struct Delivery {
    method: String,
    /// Path with query.
    target: String,
    headers: Headers,
    body: String,
}

/// A route with one genuine delivery.
struct Case {
    name: String,
    config: Config,
    router: Router,
    delivery: Delivery,
    now_ms: u64,
}

/// `[[route]]` on `prefix` with `route`, `signature` and `idempotency` lines.
fn route_text(prefix: &str, route: &str, signature: &str, idempotency: &str) -> String {
    format!(
        "[[route]]\nname = \"r\"\npath_prefix = \"{prefix}\"\n{route}\n[route.signature]\n{signature}\n\
         [route.idempotency]\n{idempotency}\n"
    )
}

/// A whole configuration of one [`route_text`] route (nothing started).
fn route_config(prefix: &str, route: &str, signature: &str, idempotency: &str) -> String {
    let store = "kind = \"embedded\"\npath = \"/tmp/unused.redb\"";
    format!(
        "{}{}",
        base_sections(store, "http://127.0.0.1:1"),
        route_text(prefix, route, signature, idempotency)
    )
}

fn hmac_hex(message: &[&[u8]]) -> String {
    hex::encode(idemgate::signature::mac(
        Algorithm::Sha256,
        LONG_SECRET.as_bytes(),
        message,
    ))
}

/// The signature section of a generic HMAC route with `extra` lines.
fn hmac_signature(extra: &str) -> String {
    format!(
        "scheme = \"hmac\"\nsecrets = [\"literal:{LONG_SECRET}\"]\nsignature = \"header:X-Sig\"\n{extra}"
    )
}

/// A body-only HMAC delivery of `body` to `target`.
fn body_signed(target: &str, body: &str, content_type: &str) -> Delivery {
    Delivery {
        method: "POST".into(),
        target: target.into(),
        headers: vec![
            ("x-sig".into(), hmac_hex(&[body.as_bytes()])),
            ("content-type".into(), content_type.into()),
        ],
        body: body.into(),
    }
}

fn hmac_cases(now: u64) -> Vec<(String, String, Delivery)> {
    let json = r#"{"id":"p1","status":"PAID","amount":"10.00"}"#;
    let ts = now.to_string();
    let stamped = {
        let mut d = body_signed("/stamped", json, "application/json");
        d.headers[0].1 = hmac_hex(&[ts.as_bytes(), b".", json.as_bytes()]);
        d.headers.push(("x-ts".into(), ts.clone()));
        d
    };
    let fields_body = format!(r#"{{"id":"p1","status":"PAID","amount":"10.00","ts":{now}}}"#);
    let fields = {
        let mut d = body_signed("/fields", &fields_body, "application/json");
        d.headers[0].1 = hmac_hex(&[b"p1\nPAID\n", ts.as_bytes()]);
        d
    };
    let method_path = {
        let mut d = body_signed("/mp/a", json, "application/json");
        d.headers[0].1 = hmac_hex(&[b"POST /mp/a\n", json.as_bytes()]);
        d
    };
    let header_key = {
        let mut d = body_signed("/hk", json, "application/json");
        d.headers[0].1 = hmac_hex(&[b"evt-1.", json.as_bytes()]);
        d.headers.push(("x-id".into(), "evt-1".into()));
        d
    };
    let form = "id=p1&amount=10.00&note=a+b";
    let xml = "<xml><out_trade_no><![CDATA[T-1]]></out_trade_no><total_fee>1</total_fee></xml>";
    vec![
        (
            "hmac {body}, no key".into(),
            route_config("/nokey", "", &hmac_signature(""), ""),
            body_signed("/nokey", json, "application/json"),
        ),
        (
            "hmac {timestamp}.{body}, json key".into(),
            route_config(
                "/stamped",
                "",
                &hmac_signature("message = \"{timestamp}.{body}\"\ntimestamp = \"header:X-Ts\""),
                "key = [\"json:/id\"]",
            ),
            stamped,
        ),
        (
            "hmac over fields only".into(),
            route_config(
                "/fields",
                "",
                &hmac_signature(
                    "message = \"{json:/id}\\n{json:/status}\\n{timestamp}\"\ntimestamp = \"json:/ts\"",
                ),
                "key = [\"json:/id\", \"json:/status\"]",
            ),
            fields,
        ),
        (
            "hmac {method} {path}, two methods, no key".into(),
            route_config(
                "/mp",
                "methods = [\"POST\", \"PUT\"]",
                &hmac_signature("message = \"{method} {path}\\n{body}\""),
                "",
            ),
            method_path,
        ),
        (
            "hmac with a signed header key".into(),
            route_config(
                "/hk",
                "",
                &hmac_signature("message = \"{header:X-Id}.{body}\""),
                "key = [\"header:X-Id\"]",
            ),
            header_key,
        ),
        (
            "hmac form, optional key".into(),
            route_config(
                "/form",
                "",
                &hmac_signature(""),
                "require_key = false\nkey = [\"form:id\"]",
            ),
            body_signed("/form", form, "application/x-www-form-urlencoded"),
        ),
        (
            "hmac xml key".into(),
            route_config(
                "/xmlk",
                "",
                &hmac_signature(""),
                "key = [\"xml:/xml/out_trade_no\"]",
            ),
            body_signed("/xmlk", xml, "text/xml"),
        ),
    ]
}

/// A `whsec_` secret of 32 bytes.
fn whsec() -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(LONG_SECRET)
    )
}

fn preset_cases(now: u64) -> Vec<(String, String, Delivery)> {
    ["standard-webhooks", "stripe", "github", "slack", "shopify"]
        .into_iter()
        .map(|scheme| {
            let secret = match scheme {
                "standard-webhooks" => whsec(),
                "stripe" => format!("whsec_{LONG_SECRET}"),
                _ => LONG_SECRET.to_owned(),
            };
            let body = preset_body(scheme, "evt_1");
            let mut headers = preset_headers(scheme, &secret, now, "evt_1", &body);
            headers.push(("content-type".into(), "application/json".into()));
            let signature = format!("scheme = \"{scheme}\"\nsecrets = [\"literal:{secret}\"]");
            let delivery = Delivery {
                method: "POST".into(),
                target: "/hook".into(),
                headers,
                body,
            };
            (
                scheme.to_owned(),
                route_config("/hook", "", &signature, ""),
                delivery,
            )
        })
        .collect()
}

fn payment_cases() -> Vec<(String, String, Delivery, Option<u64>)> {
    let mut cases = Vec::new();
    for vector in verifiable_payment_vectors() {
        if !vector.options.is_empty() {
            continue;
        }
        let signature = payment_signature(&vector.scheme, &[right_credential(&vector)], "");
        let delivery = Delivery {
            method: "POST".into(),
            target: vector.path.clone(),
            headers: vector.header_list(),
            body: vector.body.clone(),
        };
        let mut keyed = vec![("", vector.name.clone())];
        if vector.scheme == "wechatpay-v2" {
            keyed.push((
                "key = [\"xml:/xml/out_trade_no\"]",
                format!("{} keyed on xml:/xml/out_trade_no", vector.name),
            ));
        }
        for (idempotency, name) in keyed {
            let text = route_config(vector.prefix(), "", &signature, idempotency);
            cases.push((name, text, delivery.clone(), vector.now));
        }
    }
    cases
}

static CASES: LazyLock<Vec<Case>> = LazyLock::new(|| {
    let now = now_secs();
    let timed = hmac_cases(now)
        .into_iter()
        .chain(preset_cases(now))
        .map(|(name, text, delivery)| (name, text, delivery, None));
    timed
        .chain(payment_cases())
        .map(|(name, text, delivery, at)| {
            let config = Config::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let router = Router::new(&config.routes);
            Case {
                name,
                config,
                router,
                delivery,
                now_ms: at.unwrap_or(now) * 1000,
            }
        })
        .collect()
});

/// What stages 1, 3 and 4 make of `delivery`: its key hash and
/// fingerprint, or why it was refused.
fn identity(case: &Case, delivery: &Delivery) -> Result<(String, [u8; 32]), String> {
    let mut builder = http::Request::builder()
        .method(delivery.method.as_str())
        .uri(delivery.target.as_str());
    for (name, value) in &delivery.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let (parts, ()) = builder
        .body(())
        .map_err(|e| format!("unsendable: {e}"))?
        .into_parts();
    let target = match case.router.select(
        &parts.method,
        parts.uri.path(),
        parts.uri.query(),
        &parts.headers,
    ) {
        Selection::Route(target) => target,
        other => return Err(format!("not this route: {other:?}")),
    };
    let route = &case.config.routes[target.route];
    let inbound = Inbound::new(parts, Bytes::from(delivery.body.clone()));
    let verified = verify(inbound, route, case.now_ms).map_err(|u| u.rejection.to_string())?;
    let identity = identify(&verified, route, &target.canonical, "idemgate")
        .map_err(|rejection| rejection.to_string())?;
    Ok((identity.key_hash, identity.fingerprint.0))
}

#[test]
fn every_genuine_delivery_verifies() {
    assert!(CASES.len() >= 25, "{} cases", CASES.len());
    for case in CASES.iter() {
        identity(case, &case.delivery).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    }
}

fn cases_to_run() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases_to_run()))]

    #[test]
    fn a_mutant_is_refused_or_the_same_delivery(
        pick in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let case = &CASES[pick.index(CASES.len())];
        let (key, fingerprint) = identity(case, &case.delivery).expect("genuine");
        let mut mutant = case.delivery.clone();
        for change in &mutations {
            change.apply(&mut mutant);
        }
        if let Ok((mutant_key, mutant_fingerprint)) = identity(case, &mutant) {
            prop_assert_eq!(
                &mutant_key, &key,
                "{}: {:?} made a second key for {:?}", case.name, mutations, mutant
            );
            if mutant_fingerprint != fingerprint {
                let policy = &case.config.routes[0].idempotency;
                prop_assert!(
                    policy.key.is_some() && policy.require_key,
                    "{}: {:?} moved the fingerprint, which is the key", case.name, mutations
                );
            }
        }
    }
}

/// The mutations that were first found to land on a new key (and so ran a
/// captured delivery again), each on its own, deterministically.
#[test]
fn the_reported_mutants_are_the_same_delivery() {
    let find = |name: &str| {
        CASES
            .iter()
            .find(|c| c.name.contains(name))
            .unwrap_or_else(|| panic!("no case {name}"))
    };
    let nokey = find("hmac {body}, no key");
    let github = find("github");
    let wechat = find("wxv2-hmac keyed on xml");
    let at = wechat.delivery.body.find("<out_trade_no>").unwrap();
    let leaf = mutate::xml_leaves(&wechat.delivery.body)
        .iter()
        .position(|(start, _)| *start > at)
        .unwrap();
    let checks: Vec<(&Case, Vec<Mutation>)> = vec![
        (nokey, vec![Mutation::Below("/x".into())]),
        (nokey, vec![Mutation::Below("/a/b".into())]),
        (nokey, vec![Mutation::Below(";p/z".into())]),
        (
            github,
            vec![Mutation::header("x-github-delivery", "other-1")],
        ),
        (wechat, vec![Mutation::Around(leaf, " ".into())]),
        (wechat, vec![Mutation::Around(leaf, "\n\t".into())]),
        (
            wechat,
            vec![Mutation::Cdata(0), Mutation::Around(leaf, "\r\n".into())],
        ),
    ];
    for (case, mutations) in checks {
        let original = identity(case, &case.delivery).unwrap();
        let mut mutant = case.delivery.clone();
        for change in &mutations {
            change.apply(&mut mutant);
        }
        match identity(case, &mutant) {
            Ok(got) => assert_eq!(got.0, original.0, "{}: {mutations:?}", case.name),
            Err(why) => panic!("{}: {mutations:?} should verify: {why}", case.name),
        }
    }
}
