//! Signed coverage (contract §4 rule 12): which parts of a request a route's
//! signature covers.
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
//! This is what each scheme signs, so it lives beside the schemes; the
//! start-up rule that refuses a key resting on an unsigned part is
//! `crate::config`'s (its `coverage.rs`).

use http::{HeaderName, Method};

use super::{HmacScheme, PresetKind, Scheme};
use crate::extract::{Segment, Selector};

/// What a key or fingerprint part reads from a request.
#[derive(Debug, Clone, Copy)]
pub enum RequestPart<'a> {
    /// A selector's value.
    Value(&'a Selector),
    /// The event id the signature covers or the preset derives.
    SignedId,
    /// The method.
    Method,
    /// The canonical path.
    Path,
    /// The raw query string.
    Query,
    /// The raw body bytes.
    Body,
    /// Every value of a header (a fingerprint's `header:NAME`).
    Header(&'a HeaderName),
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
pub fn unsigned(scheme: &Scheme, methods: &[Method], read: RequestPart<'_>) -> Option<String> {
    if matches!(read, RequestPart::Method) && methods.len() == 1 {
        return None;
    }
    match scheme {
        Scheme::None => None,
        Scheme::Hmac(hmac) => hmac_unsigned(hmac, read),
        Scheme::Preset(preset) => preset_unsigned(preset.kind, read),
    }
}

fn hmac_unsigned(hmac: &HmacScheme, read: RequestPart<'_>) -> Option<String> {
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
        RequestPart::Value(selector) if selector.needs_body() => body || names_value(selector),
        RequestPart::Value(selector) => names_value(selector),
        RequestPart::Header(name) => names_value(&Selector::Header(name.clone())),
        // No template piece reads the raw query or yields a message id.
        RequestPart::SignedId | RequestPart::Query => false,
        RequestPart::Method => has(&Segment::Method),
        RequestPart::Path => has(&Segment::Path),
        RequestPart::Body => body,
    };
    (!covered).then(|| {
        let what = match read {
            RequestPart::Path => "the path ({path} is not in message), so every path below path_prefix reaches this route with one signature".to_owned(),
            RequestPart::Method => "the method ({method} is not in message) of a route that accepts several".to_owned(),
            RequestPart::Query => "the raw query (message can name single values with {query:NAME})".to_owned(),
            RequestPart::Body => "the body ({body} is not in message)".to_owned(),
            RequestPart::SignedId => "a signed message id (only presets have one)".to_owned(),
            RequestPart::Header(name) => format!("header:{name} (not in message)"),
            RequestPart::Value(selector) => format!("{selector} (not in message{})", if body { "" } else { ", and {body} is not either" }),
        };
        format!("message = {:?} does not cover {what}", hmac.message.to_string())
    })
}

fn preset_unsigned(kind: PresetKind, read: RequestPart<'_>) -> Option<String> {
    let raw_body = signs_raw_body(kind);
    let signed_header = |name: &HeaderName| preset_signed_headers(kind).contains(&name.as_str());
    let covered = match read {
        RequestPart::SignedId => true,
        RequestPart::Body => raw_body,
        RequestPart::Value(Selector::Json(_) | Selector::Form(_) | Selector::Xml(_))
            if raw_body =>
        {
            true
        }
        RequestPart::Value(Selector::Header(name)) | RequestPart::Header(name) => {
            signed_header(name)
        }
        RequestPart::Value(selector) => kind.signs(selector) == Some(true),
        RequestPart::Path | RequestPart::Query => kind == PresetKind::Twilio,
        RequestPart::Method => false,
    };
    (!covered).then(|| {
        let what = match read {
            RequestPart::Path => "the path, so every path below path_prefix reaches this route with one signature".to_owned(),
            RequestPart::Method => "the method of a route that accepts several".to_owned(),
            RequestPart::Query => "the query".to_owned(),
            RequestPart::Body => "the raw body bytes (it signs the parsed fields: a re-encoded body verifies with another hash)".to_owned(),
            RequestPart::SignedId => "a message id".to_owned(),
            RequestPart::Header(name) => format!("header:{name}"),
            RequestPart::Value(selector @ Selector::Form(_)) if kind == PresetKind::Twilio => format!(
                "{selector} on its own (it joins names and values with no separator, so Sid=SM1&To=x re-sent as Sid=SM1T&o=x verifies)"
            ),
            RequestPart::Value(selector) => selector.to_string(),
        };
        format!("scheme = {:?} does not sign {what}", kind.name())
    })
}
