//! Typed readers: each reads one raw setting into its runtime type,
//! records a problem naming the key when it can not, and returns a
//! stand-in so validation goes on and every problem is reported.
//!
//! Durations and word choices need no reader here: they are serde types
//! ([`super::duration::ConfigDuration`], [`super::Choice`]), refused as
//! the file is read.

use http::Uri;

use super::problems::Problems;
use super::redact::redact_url;

/// An upstream base URL: `http://`, with a host and no query (quoted
/// redacted in the error).
pub(super) fn upstream_url(problems: &mut Problems, key: &str, text: &str) -> Uri {
    let parsed = text.parse::<Uri>().ok().filter(|uri| {
        uri.scheme_str() == Some("http") && uri.authority().is_some() && uri.query().is_none()
    });
    match parsed {
        Some(uri) => uri,
        None => {
            problems.push(
                key,
                format!(
                    "{:?} is not an http:// base URL such as \"http://127.0.0.1:3000\"",
                    redact_url(text)
                ),
            );
            Uri::from_static("http://127.0.0.1:1")
        }
    }
}
