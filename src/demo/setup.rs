//! The demo's setup: the idemgate configuration it runs with and the
//! temporary directory that holds the embedded store.
//!
//! Kept apart from [`super::run`] so the one place that says how idemgate is
//! configured for the demo (the route a payment gateway would need) reads on
//! its own, next to the directory its store lives in.

use std::net::SocketAddr;
use std::path::Path;

use tempfile::TempDir;

/// A payment-gateway style route: hex HMAC-SHA256 of the body in
/// `X-Signature`, a millisecond timestamp in the body checked against a
/// five-minute window, the payment number and status as the key, and the
/// timestamp left out of the fingerprint because every retry is re-signed.
pub(super) fn config_text(workdir: &Path, upstream: SocketAddr) -> Result<String, String> {
    let store = workdir.join("idemgate.redb");
    let store = store
        .to_str()
        .ok_or_else(|| format!("temporary path {} is not UTF-8", store.display()))?;
    // A JSON string is a valid TOML basic string.
    let store = serde_json::Value::from(store).to_string();
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

[[route]]
name = "payments"
path_prefix = "/notify"
methods = ["POST"]

[route.signature]
scheme = "hmac"
secrets = ["literal:demo-secret"]
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
cache_status = ["2xx", "4xx"]
"#
    ))
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
