//! The test route's signing scheme (HMAC-SHA256 over `{timestamp}.{body}`)
//! and payment bodies.

use std::collections::HashMap;

use idemgate::config::Algorithm;

use super::{Headers, SECRET};

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Headers signing `body` at `timestamp` with `secret`, as the test route expects.
pub fn signed_with(secret: &str, timestamp: u64, body: &str) -> Headers {
    let ts = timestamp.to_string();
    let mac = idemgate::signature::mac(
        Algorithm::Sha256,
        secret.as_bytes(),
        &[ts.as_bytes(), b".", body.as_bytes()],
    );
    vec![
        ("x-signature".into(), hex::encode(mac)),
        ("x-timestamp".into(), ts),
        ("content-type".into(), "application/json".into()),
    ]
}

/// `headers` with their `Content-Type` replaced by the form type: a form
/// body is read only when it is declared as one.
pub fn as_form(mut headers: Headers) -> Headers {
    headers.retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
    headers.push((
        "content-type".into(),
        "application/x-www-form-urlencoded".into(),
    ));
    headers
}

/// Headers signing `body` now with the route's secret.
pub fn signed(body: &str) -> Headers {
    signed_with(SECRET, now_secs(), body)
}

/// A delivery body for payment `id`.
pub fn payment(id: &str) -> String {
    format!(r#"{{"id":"{id}","amount":"10.00","status":"PAID"}}"#)
}

/// The payment id in a [`payment`] body, as the upstream received it.
pub fn id_of(body: &[u8]) -> String {
    let doc: serde_json::Value = serde_json::from_slice(body).expect("delivery body is JSON");
    doc["id"].as_str().expect("delivery id").to_owned()
}

/// How many times the upstream executed each payment id.
pub fn executions(upstream: &super::Upstream) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for body in upstream.bodies() {
        *counts.entry(id_of(&body)).or_insert(0) += 1;
    }
    counts
}
