//! The demo's setup: the idemgate configuration it runs with and the
//! temporary directory that holds the embedded store.
//!
//! Kept apart from [`super::run`] so the one place that says how idemgate is
//! configured for the demo (the route a payment gateway would need) reads on
//! its own, next to the directory its store lives in.

use std::net::SocketAddr;
use std::path::Path;

use tempfile::TempDir;

use super::{ACK_BODY, LIFECYCLE_PATH, ORDER_PATH};

/// A payment-gateway style route: hex HMAC-SHA256 of the body in
/// `X-Signature`, a millisecond timestamp in the body checked against a
/// five-minute window, the payment number and status as the key, and the
/// timestamp left out of the fingerprint because every retry is re-signed.
///
/// A second route, `orders` on [`ORDER_PATH`] (the longer prefix wins), is
/// signed the same way, keeps its own scope and has an inbox: a delivery
/// the handler fails (503) is acknowledged with [`ACK_BODY`] and
/// redelivered quickly (the demo cannot wait the default 30 s). Its
/// `visibility_timeout` exceeds the upstream timeout, as it must. The
/// payments route has no inbox: scenario 4 relies on a failed first
/// attempt being released so the sender's retry is forwarded.
///
/// A third route, `lifecycle` on [`LIFECYCLE_PATH`], keys on each notice's
/// own `notifyId` (as gateways number notices) and enforces the payment's
/// state machine with `[route.entity]`: PENDING → SUCCESS | FAILED |
/// CANCELLED, FAILED → SUCCESS, SUCCESS → REFUNDED.
pub(super) fn config_text(workdir: &Path, upstream: SocketAddr) -> Result<String, String> {
    let store = workdir.join("idemgate.redb");
    let store = store
        .to_str()
        .ok_or_else(|| format!("temporary path {} is not UTF-8", store.display()))?;
    // A JSON string is a valid TOML basic string.
    let store = serde_json::Value::from(store).to_string();
    let payments = signed_route("payments", "/notify");
    let orders = signed_route("orders", ORDER_PATH);
    let lifecycle = signed_route("lifecycle", LIFECYCLE_PATH).replace(
        r#"key = ["json:/paymentNo", "json:/status"]"#,
        r#"key = ["json:/notifyId"]"#,
    );
    Ok(format!(
        r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[limits]
shutdown_grace = "5s"

[store]
kind = "embedded"
path = {store}

[upstream]
url = "http://{upstream}"
timeout = "5s"
{payments}cache_status = ["2xx", "4xx"]
{orders}
[route.inbox]
on = ["5xx", "429", "refused"]
ack_status = 200
ack_body = "{ACK_BODY}"
backoff = "300ms"
max_backoff = "1s"
visibility_timeout = "10s"
{lifecycle}
[route.entity]
id = ["json:/paymentNo"]
state = "json:/status"
transitions = ["PENDING -> SUCCESS | FAILED | CANCELLED", "FAILED -> SUCCESS", "SUCCESS -> REFUNDED"]
terminal = ["REFUNDED", "CANCELLED"]
ack_status = 200
ack_body = "{ACK_BODY}"
"#
    ))
}

/// One gateway-signed route (see [`config_text`]), its
/// `[route.idempotency]` table left open for more keys.
fn signed_route(name: &str, path_prefix: &str) -> String {
    format!(
        r#"
[[route]]
name = "{name}"
path_prefix = "{path_prefix}"
methods = ["POST"]

[route.signature]
scheme = "hmac"
secrets = ["literal:demo-secret-0123456789"]
algorithm = "sha256"
signature = "header:X-Signature"
encoding = "hex"
message = "{{body}}"
timestamp = "json:/timestamp"
timestamp_unit = "ms"
tolerance = "5m"

[route.idempotency]
key = ["json:/paymentNo", "json:/status"]
fingerprint = ["method", "path", "body"]
fingerprint_ignore = ["json:/timestamp"]
lease = "30s"
retention = "24h"
on_in_flight = "wait"
wait_timeout = "5s"
"#
    )
}

/// A fresh directory under the system temp dir for the embedded store,
/// removed when the demo ends (also on an early error, via `Drop`).
pub(super) fn work_dir() -> Result<TempDir, String> {
    tempfile::Builder::new()
        .prefix("idemgate-demo-")
        .tempdir()
        .map_err(|error| {
            let parent = std::env::temp_dir();
            format!("creating a directory in {}: {error}", parent.display())
        })
}

/// Removes the work directory at the end of the demo, saying so if that
/// fails (on an early error `TempDir`'s `Drop` removes it silently).
pub(super) fn remove(workdir: TempDir) {
    let path = workdir.path().to_owned();
    if let Err(error) = workdir.close() {
        eprintln!("could not remove {}: {error}", path.display());
    }
}
