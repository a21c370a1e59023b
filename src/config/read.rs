//! Typed readers: each reads one raw setting into its runtime type,
//! records a problem naming the key when it can not, and returns a
//! stand-in so validation goes on and every problem is reported.
//!
//! The one every section uses is a method of [`Problems`]
//! ([`Problems::choice`]), written here so that `problems.rs` stays a
//! leaf. Durations need no reader: they are typed in the raw structs
//! ([`super::duration::ConfigDuration`]).

use std::net::SocketAddr;

use http::Uri;

use super::choice::Choice;
use super::problems::Problems;
use super::redact::redact_url;

impl Problems {
    /// The value `text` names, `default` when it is absent; an unknown
    /// word is a problem that lists the valid ones.
    pub(super) fn choice<T: Choice>(&mut self, key: &str, text: Option<&str>, default: T) -> T {
        let Some(text) = text else { return default };
        if let Some(value) = T::from_name(text) {
            return value;
        }
        let names: Vec<String> = T::NAMES.iter().map(|(n, _)| format!("{n:?}")).collect();
        self.push(
            key,
            format!(
                "{text:?} is not valid; expected one of {}",
                names.join(", ")
            ),
        );
        default
    }
}

/// A listener address (`default` when absent).
pub(super) fn socket(
    problems: &mut Problems,
    key: &str,
    text: Option<String>,
    default: &str,
) -> SocketAddr {
    let text = text.unwrap_or_else(|| default.to_owned());
    problems
        .take(
            key,
            text.parse()
                .map_err(|_| format!("{text:?} is not an address such as \"127.0.0.1:8080\"")),
        )
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

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
