//! Request parameters a backend may read besides (or instead of) what the
//! signature covers (contract §4 rule 12).
//!
//! Frameworks merge parameters: servlet `getParameter`, PHP `$_REQUEST`
//! and Spring's `@RequestParam` read the query string and a form body as
//! one map, the query first; Rails, Laravel and Symfony take a `_method`
//! parameter (query or form field) as the request's real method. So a
//! genuine signed body can reach the handler with values nobody signed:
//!
//! * **Unsigned query parameters** ([`check_query`], run by the verify
//!   stage once the signature holds): refused with 400
//!   `unsigned_parameters` where the backend could read them in place of
//!   signed ones. Alipay (signed form body) and WeChat Pay v2 (signed XML
//!   body, whose notify URL WeChat requires to carry no parameters): any
//!   query parameter. Twilio signs the URL with its query: none. Every
//!   other scheme: any query parameter beside a form body
//!   (`application/x-www-form-urlencoded` or `multipart/form-data`), except
//!   those a `scheme = "hmac"` message names with a `{query:…}` segment
//!   (once each). A JSON body is not merged with the query by those
//!   frameworks, so a query beside it is left alone.
//! * **Method overrides** ([`query_overrides`], [`body_overrides`]): the
//!   `_method` values of the query and of a form body (and of a JSON
//!   body's top level, which Laravel reads as input too), which stage 1
//!   counts as the method-override headers are counted.

use std::borrow::Cow;

use http::HeaderMap;

use crate::config::{PresetKind, Scheme, Segment, Selector};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The parameter Rails, Laravel and Symfony read as the real method.
pub const METHOD_PARAMETER: &str = "_method";

/// A body frameworks parse into parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormContent {
    /// `application/x-www-form-urlencoded`.
    UrlEncoded,
    /// `multipart/form-data`.
    Multipart,
}

/// Which form content any `Content-Type` of the request declares (the
/// media type compared ignoring case and parameters), if any.
pub fn form_content(headers: &HeaderMap) -> Option<FormContent> {
    headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|value| {
            let media = value.split(';').next().unwrap_or_default().trim();
            if media.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
                Some(FormContent::UrlEncoded)
            } else if media.eq_ignore_ascii_case("multipart/form-data") {
                Some(FormContent::Multipart)
            } else {
                None
            }
        })
}

/// Whether the body may name a method: a form body, or a JSON one
/// (Laravel's `isJson()`: a content type containing `/json` or `+json`).
pub fn may_carry_method(headers: &HeaderMap) -> bool {
    form_content(headers).is_some()
        || headers
            .get_all(http::header::CONTENT_TYPE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|value| {
                let value = value.to_ascii_lowercase();
                value.contains("/json") || value.contains("+json")
            })
}

/// The `_method` values of a query string, trimmed, empty ones skipped.
pub fn query_overrides(query: Option<&str>) -> Vec<Cow<'_, str>> {
    let Some(query) = query.filter(|q| q.contains('_') || q.contains('%')) else {
        return Vec::new();
    };
    method_values(form_urlencoded::parse(query.as_bytes()))
}

/// What a form body says its method is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyOverride {
    /// No `_method` field (or no form body).
    None,
    /// The `_method` values of a URL-encoded body, or the top-level
    /// `_method` string of a JSON one.
    Methods(Vec<String>),
    /// A multipart body that mentions `_method` (idemgate does not parse
    /// multipart), or a JSON one that mentions it and does not parse: it
    /// may name any method.
    Any,
}

/// The `_method` fields of a form body (see [`BodyOverride`]).
pub fn body_overrides(headers: &HeaderMap, body: &[u8]) -> BodyOverride {
    match form_content(headers) {
        Some(FormContent::UrlEncoded) => {
            let methods: Vec<String> = method_values(form_urlencoded::parse(body))
                .into_iter()
                .map(Cow::into_owned)
                .collect();
            if methods.is_empty() {
                BodyOverride::None
            } else {
                BodyOverride::Methods(methods)
            }
        }
        Some(FormContent::Multipart) if mentions(body) => BodyOverride::Any,
        None if mentions(body) && may_carry_method(headers) => json_override(body),
        Some(FormContent::Multipart) | None => BodyOverride::None,
    }
}

/// Whether `body` holds `_method` in any case (run on every routed JSON or
/// form body, so it looks only where a `_` is, found by SIMD search).
fn mentions(body: &[u8]) -> bool {
    let rest = &METHOD_PARAMETER.as_bytes()[1..];
    memchr::memchr_iter(b'_', body).any(|at| {
        body.get(at + 1..at + METHOD_PARAMETER.len())
            .is_some_and(|next| next.eq_ignore_ascii_case(rest))
    })
}

/// The top-level `_method` members of a JSON object body (any case of the
/// name; a value that is not a string counts as any method).
fn json_override(body: &[u8]) -> BodyOverride {
    let Ok(object) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body)
    else {
        return if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
            // valid JSON, but not an object: it has no members
            BodyOverride::None
        } else {
            BodyOverride::Any
        };
    };
    let mut methods = Vec::new();
    for (name, value) in &object {
        if name.trim().eq_ignore_ascii_case(METHOD_PARAMETER) {
            match value.as_str().map(str::trim) {
                Some("") => {}
                Some(method) => methods.push(method.to_owned()),
                None => return BodyOverride::Any,
            }
        }
    }
    if methods.is_empty() {
        BodyOverride::None
    } else {
        BodyOverride::Methods(methods)
    }
}

/// The trimmed, non-empty values of `_method` pairs (name compared
/// ignoring ASCII case, as the most lenient framework would).
fn method_values<'a>(pairs: form_urlencoded::Parse<'a>) -> Vec<Cow<'a, str>> {
    pairs
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case(METHOD_PARAMETER))
        .filter_map(|(_, value)| {
            let trimmed = value.trim();
            (!trimmed.is_empty()).then(|| Cow::Owned(trimmed.to_owned()))
        })
        .collect()
}

/// Refuses, with 400 `unsigned_parameters`, query parameters beside a
/// signed body that the backend could read in place of signed ones (see
/// the module docs for the rule per scheme).
pub fn check_query(scheme: &Scheme, request: &Inbound) -> Result<(), Rejection> {
    let Some(query) = request.parts.uri.query().filter(|q| !q.is_empty()) else {
        return Ok(());
    };
    let signed: &[Segment] = match scheme {
        Scheme::None => return Ok(()),
        Scheme::Preset(preset) => match preset.kind {
            PresetKind::Twilio => return Ok(()),
            PresetKind::Alipay | PresetKind::WechatpayV2 => {
                return Err(Rejection::UnsignedParameters);
            }
            PresetKind::StandardWebhooks
            | PresetKind::Stripe
            | PresetKind::Github
            | PresetKind::Slack
            | PresetKind::Shopify
            | PresetKind::WechatpayV3
            | PresetKind::Adyen => &[],
        },
        Scheme::Hmac(hmac) => &hmac.message.segments,
    };
    if form_content(&request.parts.headers).is_none() {
        return Ok(());
    }
    let mut seen: Vec<Cow<'_, str>> = Vec::new();
    for (name, _) in form_urlencoded::parse(query.as_bytes()) {
        let covered = signed
            .iter()
            .any(|s| matches!(s, Segment::Value(Selector::Query(n)) if *n == name));
        if !covered || seen.contains(&name) {
            return Err(Rejection::UnsignedParameters);
        }
        seen.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
