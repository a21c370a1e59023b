//! Who may use the admin API: the bearer token of a request, compared in
//! constant time with `[admin] token` (named `admin`, may act) and every
//! `[[admin.tokens]]` entry, and the scope it carries: a `read` token's
//! action (any method but `GET` and `HEAD`) is refused. The routing table
//! (`routes`) says which paths need a token; [`Admin::handle`] calls
//! [`Admin::authenticate`] once for those, before the method or anything
//! else is looked at, and hands the [`Caller`] to the endpoint.

use http::{Method, Request, Response, header};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Admin;
use crate::body::ProxyBody;
use crate::config::{MAIN_TOKEN_NAME, TokenScope};
use crate::error::AdminReason;

/// The holder of a configured token: its name (recorded in the audit
/// trail and the log) and what it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caller<'a> {
    /// `admin` for `[admin] token`, else the `[[admin.tokens]]` name.
    pub name: &'a str,
    /// Whether it may act or only read.
    pub scope: TokenScope,
}

/// Why a request gets no further than the token check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal<'a> {
    /// No token is configured: the token-guarded API is off.
    Disabled,
    /// The request's token matches none configured (or there is none).
    Unknown,
    /// A read-only token asked for an action: an operator's request,
    /// refused, so the audit trail records it.
    ReadOnly(Caller<'a>),
}

impl Admin {
    /// Who presented the request's bearer token, and whether they may use
    /// `method`: every configured token is compared once, here, for the
    /// whole request (module docs).
    pub(super) fn authenticate(
        &self,
        request: &Request<Incoming>,
    ) -> Result<Caller<'_>, Refusal<'_>> {
        let main = self
            .config
            .admin_token
            .as_ref()
            .map(|secret| (MAIN_TOKEN_NAME, secret, TokenScope::Act));
        let named = self
            .config
            .admin_tokens
            .iter()
            .map(|named| (named.name.as_str(), &named.secret, named.scope));
        let tokens: Vec<_> = main.into_iter().chain(named).collect();
        if tokens.is_empty() {
            return Err(Refusal::Disabled);
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()))
            .unwrap_or_default();
        // Digests have one length whatever was presented, and every token
        // is compared, so the time taken tells nothing about any of them.
        let presented = Sha256::digest(presented);
        let mut caller = None;
        for (name, secret, scope) in tokens {
            let configured = Sha256::digest(&*secret.expose());
            if bool::from(presented.as_slice().ct_eq(configured.as_slice())) {
                caller.get_or_insert(Caller { name, scope });
            }
        }
        let caller = caller.ok_or(Refusal::Unknown)?;
        let looks = matches!(*request.method(), Method::GET | Method::HEAD);
        if looks {
            return Ok(caller);
        }
        let (method, path) = (request.method().as_str(), request.uri().path());
        if caller.scope == TokenScope::Read {
            tracing::warn!(
                target: "idemgate::admin",
                token = caller.name,
                method,
                path,
                "admin action refused: the token may only read"
            );
            return Err(Refusal::ReadOnly(caller));
        }
        tracing::info!(
            target: "idemgate::admin",
            token = caller.name,
            method,
            path,
            "admin action by token"
        );
        Ok(caller)
    }

    /// The answer to a request [`Admin::authenticate`] refused.
    pub(super) fn refused(&self, refusal: Refusal<'_>) -> Response<ProxyBody> {
        match refusal {
            Refusal::Disabled => self.problem(
                AdminReason::AdminApiDisabled,
                "the record and inbox APIs are disabled: set [admin] token",
            ),
            Refusal::Unknown => {
                let mut denied = self.problem(
                    AdminReason::Unauthorized,
                    "send Authorization: Bearer <[admin] token, or a token of [[admin.tokens]]>",
                );
                denied.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer realm=\"idemgate admin\""),
                );
                denied
            }
            Refusal::ReadOnly(caller) => self.problem(
                AdminReason::ReadOnlyToken,
                &format!(
                    "token {:?} may only read (GET); acting needs a token with scope = \"act\"",
                    caller.name
                ),
            ),
        }
    }
}

/// The value of an `Authorization` header's `Bearer` credentials: the
/// scheme is case-insensitive (RFC 9110 §11.1), one or more spaces follow.
fn bearer_token(header: &[u8]) -> Option<&[u8]> {
    let space = header.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = header.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|b| *b != b' ')?;
    Some(&rest[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for header in ["Bearer t0k", "bearer t0k", "BEARER t0k", "bEaReR  t0k"] {
            assert_eq!(
                bearer_token(header.as_bytes()),
                Some(&b"t0k"[..]),
                "{header}"
            );
        }
        for header in ["Basic t0k", "Bearert0k", "Bearer", "Bearer ", "t0k"] {
            assert_eq!(bearer_token(header.as_bytes()), None, "{header}");
        }
    }
}
