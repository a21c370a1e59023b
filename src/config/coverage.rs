//! Signed coverage (SPEC §4 rule 12): which key and fingerprint parts a
//! route's signature covers, and the start-up rule built on it.
//!
//! A part is **signed** when two requests that verify alike can not read
//! it differently: the verifier authenticated the very bytes it is read
//! from, parsed and normalised the same way (the body a scheme signs whole
//! and every `json:`/`form:`/`xml:` value parsed from it; the fields a
//! payment channel signs one by one, read from the same parse; the id a
//! preset derives from signed content; what a `message` template names).
//! Anything else is **unsigned**: headers a scheme does not sign, the
//! query, the path below `path_prefix` (prefix matching lets every path
//! under it reach the route with one signature), the method of a route
//! that accepts several. A template's `{path}` signs the whole path as
//! received, so the canonical path routing and the fingerprint use is
//! signed with it; `{method}` likewise the method.
//!
//! The rule ([`check`]):
//!
//! - Every **key part** must be signed: a key an attacker can vary lets a
//!   captured delivery run again.
//! - Every **fingerprint part** must be signed when the fingerprint is or
//!   may become the key (no `key`, or `require_key = false`). With a
//!   signed key, an unsigned fingerprint part can only turn a re-sent copy
//!   into a 422 `fingerprint_mismatch`, never a second execution, so it is
//!   left to the operator.
//! - `unsigned_key = "accept"` waives both, and start-up logs what was
//!   accepted at WARN ([`super::Config::warnings`]).
//! - A `scheme = "hmac"` template without `{body}` must name at least one
//!   request value, and must cover every key and fingerprint part; this
//!   one is not waivable: such a template authorises any body.
//! - `scheme = "none"` routes are exempt: nothing is signed, so there is
//!   nothing a key could rest on (start-up warns about the scheme itself).
//!
//! The default fingerprint follows the same rule ([`default_fingerprint`]):
//! where it may be the key it keeps only the parts the scheme signs.

use http::Method;

use super::preset::PresetKind;
use super::validate::Problems;
use super::{FingerprintPart, HmacScheme, KeyPart, Scheme, Segment, Selector};

/// Whether a route may rest its key on unsigned parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsignedKey {
    /// Refuse the configuration (the default).
    Refuse,
    /// Accept it, logged at WARN at start-up.
    Accept,
}

/// What a key or fingerprint part reads from a request.
#[derive(Debug, Clone, Copy)]
enum Read<'a> {
    Value(&'a Selector),
    SignedId,
    Method,
    Path,
    Query,
    Body,
    /// Every value of a header (a fingerprint's `header:NAME`).
    Header(&'a http::HeaderName),
}

impl<'a> From<&'a KeyPart> for Read<'a> {
    fn from(part: &'a KeyPart) -> Self {
        match part {
            KeyPart::Value(selector) => Self::Value(selector),
            KeyPart::SignedId => Self::SignedId,
        }
    }
}

impl<'a> From<&'a FingerprintPart> for Read<'a> {
    fn from(part: &'a FingerprintPart) -> Self {
        match part {
            FingerprintPart::Method => Self::Method,
            FingerprintPart::Path => Self::Path,
            FingerprintPart::Query => Self::Query,
            FingerprintPart::Body => Self::Body,
            FingerprintPart::Header(name) => Self::Header(name),
            FingerprintPart::Value(selector) => Self::Value(selector),
        }
    }
}

/// Headers a preset signs itself (besides its signature), which a key or
/// fingerprint may read.
fn preset_signed_headers(kind: PresetKind) -> &'static [&'static str] {
    match kind {
        PresetKind::Slack => &["x-slack-request-timestamp"],
        PresetKind::WechatpayV3 => &["wechatpay-timestamp", "wechatpay-nonce"],
        _ => &[],
    }
}

/// Whether the preset signs the raw body bytes whole.
fn signs_raw_body(kind: PresetKind) -> bool {
    matches!(
        kind,
        PresetKind::StandardWebhooks
            | PresetKind::Stripe
            | PresetKind::Github
            | PresetKind::Slack
            | PresetKind::Shopify
            | PresetKind::WechatpayV3
    )
}

/// Why `read` is not signed under `scheme` on a route accepting
/// `methods`; `None` when it is (or when nothing is: `scheme = "none"`).
fn unsigned(scheme: &Scheme, methods: &[Method], read: Read<'_>) -> Option<String> {
    if matches!(read, Read::Method) && methods.len() == 1 {
        return None;
    }
    match scheme {
        Scheme::None => None,
        Scheme::Hmac(hmac) => hmac_unsigned(hmac, read),
        Scheme::Preset(preset) => preset_unsigned(preset.kind, read),
    }
}

fn hmac_unsigned(hmac: &HmacScheme, read: Read<'_>) -> Option<String> {
    let has = |wanted: &Segment| hmac.message.segments.contains(wanted);
    let body = has(&Segment::Body);
    // `{timestamp}` signs the value trimmed, which a key reads as such
    // only from a header (its parts are trimmed too).
    let names_value = |selector: &Selector| {
        has(&Segment::Value(selector.clone()))
            || (has(&Segment::Timestamp)
                && matches!(selector, Selector::Header(_))
                && hmac
                    .timestamp
                    .as_ref()
                    .is_some_and(|t| t.selector == *selector))
    };
    let covered = match read {
        Read::Value(selector) if selector.needs_body() => body || names_value(selector),
        Read::Value(selector) => names_value(selector),
        Read::Header(name) => names_value(&Selector::Header(name.clone())),
        // No template piece reads the raw query or yields a message id.
        Read::SignedId | Read::Query => false,
        Read::Method => has(&Segment::Method),
        Read::Path => has(&Segment::Path),
        Read::Body => body,
    };
    (!covered).then(|| {
        let what = match read {
            Read::Path => "the path ({path} is not in message), so every path below path_prefix reaches this route with one signature".to_owned(),
            Read::Method => "the method ({method} is not in message) of a route that accepts several".to_owned(),
            Read::Query => "the raw query (message can name single values with {query:NAME})".to_owned(),
            Read::Body => "the body ({body} is not in message)".to_owned(),
            Read::SignedId => "a signed message id (only presets have one)".to_owned(),
            Read::Header(name) => format!("header:{name} (not in message)"),
            Read::Value(selector) => format!("{selector} (not in message{})", if body { "" } else { ", and {body} is not either" }),
        };
        format!("message = {:?} does not cover {what}", hmac.message.to_string())
    })
}

fn preset_unsigned(kind: PresetKind, read: Read<'_>) -> Option<String> {
    let raw_body = signs_raw_body(kind);
    let signed_header =
        |name: &http::HeaderName| preset_signed_headers(kind).contains(&name.as_str());
    let covered = match read {
        Read::SignedId => true,
        Read::Body => raw_body,
        Read::Value(Selector::Json(_) | Selector::Form(_) | Selector::Xml(_)) if raw_body => true,
        Read::Value(Selector::Header(name)) | Read::Header(name) => signed_header(name),
        Read::Value(selector) => kind.signs(selector) == Some(true),
        Read::Path | Read::Query => kind == PresetKind::Twilio,
        Read::Method => false,
    };
    (!covered).then(|| {
        let what = match read {
            Read::Path => "the path, so every path below path_prefix reaches this route with one signature".to_owned(),
            Read::Method => "the method of a route that accepts several".to_owned(),
            Read::Query => "the query".to_owned(),
            Read::Body => "the raw body bytes (it signs the parsed fields: a re-encoded body verifies with another hash)".to_owned(),
            Read::SignedId => "a message id".to_owned(),
            Read::Header(name) => format!("header:{name}"),
            Read::Value(selector @ Selector::Form(_)) if kind == PresetKind::Twilio => format!(
                "{selector} on its own (it joins names and values with no separator, so Sid=SM1&To=x re-sent as Sid=SM1T&o=x verifies)"
            ),
            Read::Value(selector) => selector.to_string(),
        };
        format!("scheme = {:?} does not sign {what}", kind.name())
    })
}

/// The fingerprint a route gets when it sets none: method, path and body,
/// but where the fingerprint may be the key (`may_be_key`) only the ones
/// the scheme signs (a body-only HMAC gets `["method", "body"]` on a
/// one-method route, so `/notify/x` and `/notify/y` are one delivery).
/// A `scheme = "hmac"` template without `{body}` fingerprints the values
/// it names instead of the body (its timestamp and signature aside: a
/// sender's retry changes those).
pub(super) fn default_fingerprint(
    scheme: &Scheme,
    methods: &[Method],
    may_be_key: bool,
) -> Vec<FingerprintPart> {
    let all = [
        FingerprintPart::Method,
        FingerprintPart::Path,
        FingerprintPart::Body,
    ];
    let template = match scheme {
        Scheme::Hmac(hmac) if !hmac.message.segments.contains(&Segment::Body) => Some(hmac),
        _ => None,
    };
    if !may_be_key && template.is_none() {
        return all.to_vec();
    }
    let mut parts: Vec<FingerprintPart> = all
        .iter()
        .filter(|part| unsigned(scheme, methods, (*part).into()).is_none())
        .cloned()
        .collect();
    if let Some(hmac) = template {
        for segment in &hmac.message.segments {
            if let Segment::Value(selector) = segment {
                let volatile = *selector == hmac.signature
                    || hmac
                        .timestamp
                        .as_ref()
                        .is_some_and(|t| t.selector == *selector);
                let part = FingerprintPart::Value(selector.clone());
                if !volatile && !parts.contains(&part) {
                    parts.push(part);
                }
            }
        }
    }
    if parts.is_empty() {
        all.to_vec()
    } else {
        parts
    }
}

/// Applies the rule of the module doc to route `key` (`route[0]`).
/// Returns the unsigned parts `unsigned_key = "accept"` let through, for
/// start-up's warning.
pub(super) fn check(
    problems: &mut Problems,
    key: &str,
    scheme: &Scheme,
    methods: &[Method],
    idempotency: &super::Idempotency,
    policy: UnsignedKey,
) -> Vec<String> {
    if matches!(scheme, Scheme::None) {
        return Vec::new();
    }
    let mut accepted = Vec::new();
    let no_body_template = match scheme {
        Scheme::Hmac(hmac) if !hmac.message.segments.contains(&Segment::Body) => {
            check_template(problems, &format!("{key}.signature.message"), hmac);
            true
        }
        _ => false,
    };
    let keys = idempotency.key.as_deref().unwrap_or_default();
    let may_be_key = idempotency.key.is_none() || !idempotency.require_key;
    let parts = keys
        .iter()
        .enumerate()
        .map(|(i, part)| {
            (
                format!("key[{i}]"),
                part.to_string(),
                Read::from(part),
                true,
            )
        })
        .chain(idempotency.fingerprint.iter().enumerate().map(|(i, part)| {
            (
                format!("fingerprint[{i}]"),
                part.to_string(),
                Read::from(part),
                may_be_key,
            )
        }));
    for (field, name, read, decides_key) in parts {
        let Some(why) = unsigned(scheme, methods, read) else {
            continue;
        };
        let at = format!("{key}.idempotency.{field}");
        if no_body_template {
            problems.push(
                &at,
                format!(
                    "{name} is not signed: {why}; a message without {{body}} must cover every key and fingerprint part, or one captured signature authorises other requests (add {{body}} to message, or name {name} in it)"
                ),
            );
        } else if decides_key && policy == UnsignedKey::Refuse {
            let role = if field.starts_with("key") {
                "the key"
            } else {
                "the fingerprint, which is the key here (no key, or require_key = false),"
            };
            problems.push(
                &at,
                format!(
                    "{name} is not signed: {why}; {role} would rest on it, so a captured delivery re-sent with another value runs again. Use a signed part (omit key for the scheme's own), or set unsigned_key = \"accept\" in [route.idempotency] to take that risk"
                ),
            );
        } else if decides_key {
            accepted.push(format!("{field} {name} ({why})"));
        }
    }
    accepted
}

/// A template without `{body}` must name some value of the request
/// besides its timestamp and signature: `{method}` and `{path}` name no
/// delivery, so they do not count.
fn check_template(problems: &mut Problems, key: &str, hmac: &HmacScheme) {
    let names_a_value = hmac.message.segments.iter().any(|segment| match segment {
        Segment::Value(selector) => {
            *selector != hmac.signature
                && hmac
                    .timestamp
                    .as_ref()
                    .is_none_or(|t| t.selector != *selector)
        }
        Segment::Body => true,
        Segment::Path | Segment::Method | Segment::Literal(_) | Segment::Timestamp => false,
    });
    if !names_a_value {
        problems.push(
            key,
            format!(
                "{:?} covers neither {{body}} nor any value of the request: one captured signature would authorise any body; add {{body}}",
                hmac.message.to_string()
            ),
        );
    }
}

#[cfg(test)]
mod tests;
