//! The test route's signing scheme (HMAC-SHA256 over `{timestamp}.{body}`)
//! and payment bodies.

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

/// Headers signing `body` now with the route's secret.
pub fn signed(body: &str) -> Headers {
    signed_with(SECRET, now_secs(), body)
}

/// A delivery body for payment `id`.
pub fn payment(id: &str) -> String {
    format!(r#"{{"id":"{id}","amount":"10.00","status":"PAID"}}"#)
}
