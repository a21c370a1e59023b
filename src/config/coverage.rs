//! The signed-coverage rule (contract §4 rule 12): a key, or a fingerprint
//! that is or may become the key, must rest only on parts the route's
//! signature covers.
//!
//! Which parts a scheme signs (and why not, when it does not) is
//! `crate::signature`'s knowledge ([`unsigned`]); this file applies it to
//! a route's `[route.idempotency]` and names the key of every problem.
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
//! The default fingerprint follows the same rule (`idempotency.rs`): where
//! it may be the key it keeps only the parts the scheme signs.

use http::Method;

use super::idempotency::{Idempotency, UnsignedKey};
use super::problems::Problems;
use crate::extract::Segment;
use crate::signature::{HmacScheme, RequestPart, Scheme, unsigned};

/// Applies the rule of the module doc to route `key` (`route[0]`).
/// Returns the unsigned parts `unsigned_key = "accept"` let through, for
/// start-up's warning.
pub(super) fn check(
    problems: &mut Problems,
    key: &str,
    scheme: &Scheme,
    methods: &[Method],
    idempotency: &Idempotency,
    policy: UnsignedKey,
) -> Vec<String> {
    if matches!(scheme, Scheme::None) {
        return Vec::new();
    }
    let no_body_template = match scheme {
        Scheme::Hmac(hmac) if !hmac.message.segments.contains(&Segment::Body) => {
            check_template(problems, &format!("{key}.signature.message"), hmac);
            true
        }
        _ => false,
    };
    let mut accepted = Vec::new();
    for part in judged_parts(idempotency) {
        let Some(why) = unsigned(scheme, methods, part.read) else {
            continue;
        };
        let (field, name) = (&part.field, &part.name);
        let at = format!("{key}.idempotency.{field}");
        if no_body_template {
            problems.push(
                &at,
                format!(
                    "{name} is not signed: {why}; a message without {{body}} must cover every key and fingerprint part, or one captured signature authorises other requests (add {{body}} to message, or name {name} in it)"
                ),
            );
        } else if part.decides_key && policy == UnsignedKey::Refuse {
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
        } else if part.decides_key {
            accepted.push(format!("{field} {name} ({why})"));
        }
    }
    accepted
}

/// One key or fingerprint part, as the rule judges it.
struct JudgedPart<'a> {
    /// Where it is written: `key[0]`, `fingerprint[1]`.
    field: String,
    /// The part as written.
    name: String,
    /// What it reads from a request.
    read: RequestPart<'a>,
    /// Whether the key rests on it: every key part, and every fingerprint
    /// part when the fingerprint is or may become the key.
    decides_key: bool,
}

/// Every key part, then every fingerprint part, in order.
fn judged_parts(idempotency: &Idempotency) -> impl Iterator<Item = JudgedPart<'_>> {
    let keys = idempotency.key.as_deref().unwrap_or_default();
    let may_be_key = idempotency.key.is_none() || !idempotency.require_key;
    let key_parts = keys.iter().enumerate().map(|(i, part)| JudgedPart {
        field: format!("key[{i}]"),
        name: part.to_string(),
        read: RequestPart::from(part),
        decides_key: true,
    });
    let fingerprint = idempotency.fingerprint.iter().enumerate();
    key_parts.chain(fingerprint.map(move |(i, part)| JudgedPart {
        field: format!("fingerprint[{i}]"),
        name: part.to_string(),
        read: RequestPart::from(part),
        decides_key: may_be_key,
    }))
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
