//! The preset half of `[route.signature]`, validated: a named sender
//! gets exactly the credential it verifies with, the window it signs (if
//! any), and `public_url` or `allow_rsa1` only where it reads them.
//!
//! What each sender needs is `crate::signature`'s knowledge ([`PresetKind`]);
//! this file checks a route's table against it and names the key of every
//! problem.

use std::time::Duration;

use super::RawSignature;
use super::{checked_secrets, hmac_only_keys};
use crate::config::problems::Problems;
use crate::config::redact::redact_url;
use crate::signature::{
    Credential, Derivation, Preset, PresetKind, PublicKeys, RawPublicKey, Secret, decode_hex_key,
    decode_whsec,
};

/// The `[route.signature]` keys only some presets read, and whether each
/// is set (an error with `scheme = "hmac"` or `"none"`).
pub(super) fn preset_only_keys(raw: &RawSignature) -> [(&'static str, bool); 3] {
    [
        ("public_keys", !raw.public_keys.is_empty()),
        ("public_url", raw.public_url.is_some()),
        ("allow_rsa1", raw.allow_rsa1.is_some()),
    ]
}

/// Validates a preset's `[route.signature]` under `key`: `secrets` are the
/// resolved `secrets` entries (an unresolved one is already a problem).
pub(super) fn preset(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
    secrets: &[Secret],
) -> Preset {
    let name = &raw.scheme;
    for (field, set) in hmac_only_keys(raw) {
        if set {
            problems.push(
                &format!("{key}.{field}"),
                format!("only for scheme = \"hmac\"; scheme = {name:?} fixes it itself"),
            );
        }
    }
    let public_keys = credentials(problems, key, raw, kind);
    let tolerance = tolerance(problems, key, raw, kind);
    let keys = mac_keys(problems, key, kind, secrets);
    let public_url = public_url(problems, key, raw, kind);
    if raw.allow_rsa1.is_some() && kind != PresetKind::Alipay {
        problems.push(
            &format!("{key}.allow_rsa1"),
            format!("only for scheme = \"alipay\"; scheme = {name:?} has no RSA1 sign type"),
        );
    }
    Preset {
        kind,
        keys,
        public_keys,
        tolerance,
        public_url,
        allow_rsa1: raw.allow_rsa1.unwrap_or(false),
    }
}

/// Checks that the preset got the credential it verifies with, and only
/// that one; resolves the public keys.
fn credentials(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
) -> PublicKeys {
    let name = &raw.scheme;
    match kind.credential() {
        Credential::Secrets => {
            if raw.secrets.is_empty() {
                problems.push(
                    &format!("{key}.secrets"),
                    "at least one secret is required, e.g. [\"env:WEBHOOK_SECRET\"]",
                );
            }
            if !raw.public_keys.is_empty() {
                problems.push(
                    &format!("{key}.public_keys"),
                    format!("scheme = {name:?} verifies with secrets, not public keys"),
                );
            }
            no_public_keys()
        }
        Credential::PublicKeys => {
            if !raw.secrets.is_empty() {
                problems.push(
                    &format!("{key}.secrets"),
                    format!(
                        "scheme = {name:?} verifies RSA signatures with public_keys, not secrets"
                    ),
                );
            }
            if raw.public_keys.is_empty() {
                problems.push(
                    &format!("{key}.public_keys"),
                    "at least one public key is required, e.g. [\"file:/etc/idemgate/sender_public_key.pem\"]",
                );
            }
            public_keys(problems, key, &raw.public_keys)
        }
    }
}

/// The MAC keys of a preset that verifies with secrets, decoded the way
/// its sender writes them (standard-webhooks' `whsec_`, Adyen's hex).
fn mac_keys(
    problems: &mut Problems,
    key: &str,
    kind: PresetKind,
    secrets: &[Secret],
) -> Vec<Secret> {
    match kind {
        PresetKind::StandardWebhooks => derived(
            problems,
            key,
            secrets,
            decode_whsec,
            "a standard-webhooks secret is \"whsec_\" followed by base64",
        ),
        PresetKind::Adyen => derived(
            problems,
            key,
            secrets,
            decode_hex_key,
            "an adyen HMAC key is hex, as the Customer Area shows it",
        ),
        _ => secrets.to_vec(),
    }
}

/// `public_url`: required by Twilio, which signs the full URL, and
/// refused by every other sender.
fn public_url(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
) -> Option<String> {
    let name = &raw.scheme;
    match (kind, raw.public_url.as_deref()) {
        (PresetKind::Twilio, Some(text)) => {
            problems.take(&format!("{key}.public_url"), parse_public_url(text))
        }
        (PresetKind::Twilio, None) => {
            problems.push(
                &format!("{key}.public_url"),
                "required with scheme = \"twilio\": the scheme and host the sender calls, e.g. \"https://hooks.example.com\" (Twilio signs the full URL, and idemgate sees only its own address)",
            );
            None
        }
        (_, Some(_)) => {
            problems.push(
                &format!("{key}.public_url"),
                format!("only for scheme = \"twilio\"; scheme = {name:?} does not sign the URL"),
            );
            None
        }
        (_, None) => None,
    }
}

/// Resolves `public_keys`, each failure named by its index and its
/// source (a `literal:` key by its kind only: it is long).
fn public_keys(problems: &mut Problems, key: &str, entries: &[RawPublicKey]) -> PublicKeys {
    PublicKeys::resolve(entries).unwrap_or_else(|errors| {
        for (index, error) in errors {
            let source = match &entries[index] {
                RawPublicKey::Source(s) | RawPublicKey::Bound { key: s, .. } => s,
            };
            let shown = if source.starts_with("literal:") {
                "literal"
            } else {
                source
            };
            problems.push(
                &format!("{key}.public_keys[{index}]"),
                format!("{shown}: {error}"),
            );
        }
        no_public_keys()
    })
}

/// The empty key list of a preset that verifies with secrets.
fn no_public_keys() -> PublicKeys {
    PublicKeys::resolve(&[]).expect("no keys, no errors")
}

/// The preset's window: its sender's own unless `tolerance` narrows or
/// widens it; refused for senders that sign no timestamp.
fn tolerance(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
) -> Option<Duration> {
    match (kind.default_tolerance(), raw.tolerance) {
        (None, Some(_)) => {
            problems.push(
                &format!("{key}.tolerance"),
                format!(
                    "scheme = {:?} signs no timestamp, so there is no window to set",
                    raw.scheme
                ),
            );
            None
        }
        (None, None) => None,
        (Some(default), None) => Some(default),
        (Some(_), Some(written)) => {
            let tolerance = written.get();
            if tolerance.is_zero() {
                problems.push(&format!("{key}.tolerance"), "must be greater than zero");
            }
            Some(tolerance)
        }
    }
}

/// Each secret decoded by `derive`; one that does not decode is refused
/// with `hint`.
fn derived(
    problems: &mut Problems,
    key: &str,
    secrets: &[Secret],
    derive: Derivation,
    hint: &str,
) -> Vec<Secret> {
    checked_secrets(problems, key, secrets, |secret| {
        secret.derived(derive).map_err(|_| hint.to_owned())
    })
}

/// Checks `public_url`: `http(s)://host[:port][/prefix]`, nothing after
/// and no credentials (errors quote it redacted).
fn parse_public_url(text: &str) -> Result<String, String> {
    let shown = redact_url(text);
    let uri: http::Uri = text
        .parse()
        .map_err(|_| format!("{shown:?} is not a URL"))?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(format!(
            "{shown:?}: remove the user and password; public_url holds only scheme, host and an optional path prefix"
        ));
    }
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    if !scheme_ok || uri.host().is_none_or(str::is_empty) {
        return Err(format!(
            "{shown:?} must be an http(s) URL with a host, e.g. \"https://hooks.example.com\""
        ));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!(
            "{shown:?}: only scheme, host and an optional path prefix; the request's own path and query are appended"
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests;
